"""The training configuration loads strictly: bad YAML fails with the dotted key, value and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.cli import main
from autotune.config import TrainConfig, dump_config, load_config, save_config
from autotune.errors import ConfigError


def write(tmp_path, text: str):
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    return path


def test_round_trip(tmp_path):
    cfg = TrainConfig(preset="tiny", batch_size=2)
    cfg.ddp.bucket_cap_mb = 25.0
    cfg.precision.regions = {"dit": "fp32"}
    cfg.graphs.mode, cfg.graphs.regions = "regions", ["dit"]
    path = tmp_path / "c.yaml"
    save_config(cfg, path)
    assert load_config(path) == cfg
    assert dump_config(load_config(path)) == dump_config(cfg)


def test_partial_file_takes_defaults(tmp_path):
    cfg = load_config(write(tmp_path, "preset: tiny\nddp:\n  static_graph: true\n"))
    assert cfg.preset == "tiny" and cfg.ddp.static_graph and cfg.ddp.bucket_cap_mb == 100.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "ddp:\n  bucket_cap_mb: -3\n",
            r"cfg\.yaml: ddp\.bucket_cap_mb: -3\.0 is out of range; allowed: a number > 0",
        ),
        (
            "ddp:\n  bucket_size: 3\n",
            r"ddp\.bucket_size: unknown key; allowed: \['broadcast_buffers', 'bucket_cap_mb'",
        ),
        ("nonsense: 1\n", r"nonsense: unknown key; allowed: \["),
        ("batch_size: sixteen\n", r"batch_size: 'sixteen' has the wrong type; allowed: an integer"),
        ("batch_size: 0\n", r"batch_size: 0 is out of range; allowed: an integer >= 1"),
        (
            "ddp:\n  static_graph: 1\n",
            r"ddp\.static_graph: 1 has the wrong type; allowed: true or false",
        ),
        (
            "precision:\n  regions:\n    dit: fp4\n",
            r"precision\.regions\.dit: 'fp4' is not one of the choices; allowed: \['fp32', 'bf16', 'fp16', 'fp8'\]",
        ),
        (
            "graphs:\n  mode: always\n",
            r"graphs\.mode: 'always' is not one of the choices; allowed: \['none', 'regions', 'step'\]",
        ),
        (
            "data:\n  num_workers: 0\n  prefetch_factor: 4\n",
            r"data\.prefetch_factor: 4 is set; allowed: null when num_workers is 0",
        ),
        (
            "optimizer:\n  betas: [0.9]\n",
            r"optimizer\.betas: \[0\.9\] is out of range; allowed: two numbers in \[0, 1\)",
        ),
        (
            "model:\n  freeze: [vision, dit]\n  unfreeze: [dit]\n",
            r"cfg\.yaml: model\.unfreeze: \['dit'\] is also in model\.freeze; allowed: each region "
            r"in one of freeze and unfreeze",
        ),
        ("schema_version: 7\n", r"schema_version: 7 is not supported; allowed: 1"),
        # what the training job's throughput watch reads of the provenance: a traceback mid-job
        (
            "provenance:\n  samples_per_s: fast\n",
            r"provenance\.samples_per_s: 'fast' has the wrong type; allowed: null or a finite number >= 0",
        ),
        (
            "provenance:\n  samples_per_s: .nan\n",
            r"provenance\.samples_per_s: nan has the wrong type; allowed: null or a finite number >= 0",
        ),
        (
            "provenance:\n  samples_per_s: 10\n  world_size: 0.5\n",
            r"provenance\.world_size: 0\.5 has the wrong type; allowed: null or an integer >= 1",
        ),
        ("ddp: 5\n", r"ddp: 5 has the wrong type; allowed: a mapping"),
        (
            "- a\n- b\n",
            r"the configuration: a list of 2 items has the wrong type; allowed: a mapping",
        ),
        ("ddp: [unclosed\n", r"cfg\.yaml: not valid YAML at line \d+"),
    ],
)
def test_bad_config_messages(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, text))


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match=r"nope\.yaml: no such file"):
        load_config(tmp_path / "nope.yaml")


def test_cli_help_lists_commands(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    assert "inspect" in capsys.readouterr().out


def test_cli_inspect_json(capsys):
    import json

    assert main(["inspect", "--preset", "tiny", "--json"]) == 0
    info = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {"params_total", "params_trainable", "regions", "flops_per_sample"} <= set(info)
    assert info["params_total"] > info["params_trainable"] > 0


@pytest.mark.parametrize("listing", [[], ["--list"]], ids=["inspect", "list"])
def test_cli_unknown_workload_one_line(capsys, listing):
    """``--list`` listed the known workloads and exited 0, the name asked for silently left out."""
    assert main(["inspect", "--workload", "nope", *listing]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and "workload 'nope' is unknown" in err[0] and captured.out == ""


@pytest.mark.timeout(20)
def test_accumulation_not_dividing_a_huge_batch_is_refused_at_once(tmp_path):
    """The error listed every divisor by trying each number up to batch_size: 2**63 - 1 never ended."""
    path = write(tmp_path, "batch_size: 9223372036854775807\nmemory:\n  accumulation_steps: 3\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value).endswith(
        "memory.accumulation_steps: 3 does not divide batch_size 9223372036854775807; allowed: a "
        "divisor of batch_size 9223372036854775807: [1, 7, 49, 73, 127, 337, 511, 889, ...]"
    )


EXAMPLES = sorted((Path(__file__).parents[2] / "reports" / "examples").glob("*/best.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.parent.name)
def test_every_shipped_example_configuration_loads(path):
    """A reader trains a shipped example's best.yaml as it is (`train --config`): the HF causal LM's
    held GR00T's model knobs, which that workload no longer declares, and was refused."""
    assert EXAMPLES and load_config(path).workload
