"""Bad configuration, space and dataset paths through the real command line (issue 18, rows 8,
10 and 13): one line naming the file, key or event, a non-zero exit, no traceback."""

from __future__ import annotations

import os
import re
import shutil

import pyarrow.parquet as pq
import pytest

from autotune.cli import main
from autotune.config import read_yaml
from autotune.data import MakeSpec, make_dataset
from autotune.errors import ConfigError
from tests.clirun import autotune, one_line_error

LOUD = "tests.config.loud:Workload"
BINARY = (
    bytes(range(128, 256)) * 2 + b"\x00\xff"
)  # what `head -c 300 /dev/urandom` gives: not UTF-8


def test_a_binary_config_file_is_one_line(tmp_path):
    (tmp_path / "b.yaml").write_bytes(BINARY)
    line = one_line_error(autotune("train", "--config", tmp_path / "b.yaml"))
    assert (
        line
        == f"autotune: error: {tmp_path / 'b.yaml'}: not a text file (byte 0 is not UTF-8); expected YAML text"
    )


def test_a_binary_space_file_is_one_line(tmp_path):
    (tmp_path / "b.yaml").write_bytes(BINARY)
    line = one_line_error(
        autotune("run", "--space", tmp_path / "b.yaml", "--out", tmp_path / "run")
    )
    assert f"{tmp_path / 'b.yaml'}: not a text file" in line
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "text", ["", "\n\n", "# best.yaml, to be filled in\n"], ids=["empty", "blank", "comment"]
)
def test_an_empty_config_file_is_refused_not_read_as_defaults(tmp_path, text):
    (tmp_path / "e.yaml").write_text(text)
    line = one_line_error(autotune("train", "--config", tmp_path / "e.yaml"))
    assert line == (
        f"autotune: error: {tmp_path / 'e.yaml'}: the file is empty (no YAML document in it); "
        "expected a mapping of keys"
    )


def test_an_explicit_empty_mapping_is_still_the_defaults(tmp_path):
    (tmp_path / "d.yaml").write_text("{}\n")
    assert read_yaml(tmp_path / "d.yaml") == {}


def test_a_duplicate_key_in_a_space_file_names_the_key(tmp_path):
    space = tmp_path / "dup.yaml"
    space.write_text("knobs:\n"
                     "  optimizer.impl: {type: categorical, choices: [foreach, fused], group: optimizer}\n"
                     "  data.num_workers: {type: int, low: 0, high: 2, group: data}\n"
                     "  optimizer.impl: {type: categorical, choices: [fused], group: optimizer}\n")  # fmt: skip
    line = one_line_error(autotune("run", "--space", space, "--out", tmp_path / "run"))
    assert line == (
        f"autotune: error: {space}: knobs.optimizer.impl: duplicate key at line 4 (first at line 2); "
        "a key may appear once"
    )


def test_a_duplicate_key_in_a_config_file_names_the_key(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "preset: tiny\nddp:\n  bucket_cap_mb: 25\n  static_graph: true\n  bucket_cap_mb: 50\n"
    )
    line = one_line_error(autotune("train", "--config", cfg))
    assert line.endswith(
        f"{cfg}: ddp.bucket_cap_mb: duplicate key at line 5 (first at line 3); a key may appear once"
    )


@pytest.mark.parametrize(
    "text", ["a: {x: 1, x: 2}\n", "a:\n- {x: 1, x: 2}\n", '"1": a\n1: b\n"1": c\n']
)
def test_duplicates_anywhere_are_found_and_merges_may_override(tmp_path, text):
    (tmp_path / "d.yaml").write_text(text)
    with pytest.raises(ConfigError, match=r"d\.yaml: .*duplicate key"):
        read_yaml(tmp_path / "d.yaml")
    (tmp_path / "m.yaml").write_text("base: &b {x: 1, y: 2}\nderived:\n  <<: *b\n  x: 3\n")
    assert read_yaml(tmp_path / "m.yaml") == {"base": {"x": 1, "y": 2}, "derived": {"x": 3, "y": 2}}


def test_data_make_on_a_file_is_one_line_and_keeps_the_file(tmp_path, capsys):
    target = tmp_path / "notes.txt"
    target.write_text("mine\n")
    make = ["data", "make", str(target), "--episodes", "1", "--size", "32", "--frames", "4"]
    line = one_line_error(autotune(*make))
    assert line.startswith(f"autotune: error: {target}: is a file, not a folder")
    # the same checks in this process (no second interpreter): --force never deletes a file
    assert main([*make, "--force"]) == 2
    make[2] = str(target / "ds")
    assert main(make) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"autotune: error: {target}: is a file, not a folder; give a folder for the dataset (--force "
                   "replaces a dataset folder, never a file)",
                   f"autotune: error: {target / 'ds'}: {target} is a file, not a folder; the dataset folder cannot "
                   "be made inside it"]  # fmt: skip
    assert target.read_text() == "mine\n"


def test_a_corrupt_parquet_is_one_line(tmp_path):
    root = make_dataset(tmp_path / "ds", MakeSpec(episodes=1, views=1, size=32, seed=0, frames=4))
    path = root / "data/chunk-000/episode_000000.parquet"
    assert pq.read_table(path).num_rows == 4
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2 : len(raw) // 2 + 40] = b"x" * 40  # the footer's metadata (thrift) is broken
    path.write_bytes(bytes(raw))
    line = one_line_error(autotune("data", "check", root))
    assert line.startswith(f"autotune: error: {path}: not a readable parquet file (")


def _config(tmp_path, text):
    path = tmp_path / "w.yaml"
    path.write_text(f"workload: {LOUD!r}\npreset: tiny\ndevice: cpu\n{text}")
    return path


def test_a_module_workload_is_imported_only_after_the_file_is_validated(tmp_path):
    line = one_line_error(autotune("train", "--config", _config(tmp_path, "batch_size: 0\n")))
    assert line.endswith("w.yaml: batch_size: 0 is out of range; allowed: an integer >= 1")
    line = one_line_error(
        autotune("train", "--config", _config(tmp_path, "graphs: {mode: step}\n"))
    )
    assert line == (
        f"autotune: error: {tmp_path / 'w.yaml'}: graphs.mode: refused: CUDA graphs need a CUDA device"
    )
    # a valid file reaches the module (so the lines above would have shown its import)
    proc = autotune("train", "--config", _config(tmp_path, "batch_size: 2\n"), "--steps", "1", "--warmup", "0",
                    "--synthetic")  # fmt: skip
    assert "tests.config.loud was imported" in one_line_error(proc)


@pytest.mark.skipif(
    os.geteuid() == 0 or shutil.which("chmod") is None, reason="root reads every file"
)
def test_an_unreadable_config_is_one_line(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("preset: tiny\n")
    cfg.chmod(0)
    assert "cannot be read" in one_line_error(autotune("train", "--config", cfg))


LAUGHS = "".join(
    f"{chr(97 + i)}: &{chr(97 + i)} [{', '.join([f'*{chr(96 + i)}'] * 9 if i else ['lol'] * 9)}]\n"
    for i in range(9)
)  # nine levels of nine aliases: 387 million strings from 300 bytes


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (LAUGHS, r"its aliases \(\*name\) expand to more than 100000 values"),
        ("- " + LAUGHS.replace("\n", "\n- ")[:-2], r"its aliases \(\*name\) expand"),
        (
            "a: " + "[" * 20000 + "]" * 20000 + "\n",
            r"nests lists or mappings deeper than can be read",
        ),
        ("a: " + "{b: " * 5000 + "1" + "}" * 5000 + "\n", r"nests lists or mappings deeper"),
    ],
    ids=["alias-bomb", "alias-bomb-list", "deep-lists", "deep-mappings"],
)
def test_an_alias_bomb_or_deep_nesting_is_one_line(tmp_path, text, message):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=rf"^{path}: {message}"):
        read_yaml(path)


def test_anchors_within_reason_and_an_anchor_inside_itself_still_read(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("a: &a [1, 2]\nb: [*a, *a]\nc: &c [*c]\n")
    data = read_yaml(path)
    assert data["b"] == [[1, 2], [1, 2]] and data["c"][0] is data["c"]


def _error_line(capsys, *argv) -> str:
    """``autotune ARGV`` run in this process (the CLI's ``main``): its one error line, exit 2."""
    capsys.readouterr()
    assert main([str(a) for a in argv]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err.strip()


@pytest.mark.parametrize("char", ["\x1b", "\x00", "\x07"], ids=["escape", "nul", "bell"])
def test_a_control_character_in_a_config_is_one_line(tmp_path, capsys, char):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"preset: tiny\nseed: 1 {char}[0m\n")
    line = _error_line(capsys, "train", "--config", cfg)
    assert line == (
        f"autotune: error: {cfg}: not valid YAML: character #x{ord(char):04x} at offset 21 "
        "(special characters are not allowed); a configuration is printable text"
    )


@pytest.mark.parametrize(
    ("value", "key"),
    [
        ("{when: 2024-01-01}", "provenance.when"),
        ("{blob: !!binary aGVsbG8=}", "provenance.blob"),
        ("{runs: [1, {at: 2024-01-01 10:00:00}]}", r"provenance.runs\[1\].at"),
        ("{c: {3: x}}", "provenance.c.3"),
    ],
    ids=["date", "binary", "nested-timestamp", "integer-key"],
)
def test_a_provenance_value_json_cannot_hold_is_refused_before_training(
    tmp_path, capsys, value, key
):
    """Each checkpoint writes the configuration into its JSON state: a value JSON cannot hold
    would fail every save after the steps before it had trained."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"preset: tiny\nprovenance: {value}\n")
    out = tmp_path / "job"
    line = _error_line(capsys, "train", "--config", cfg, "--max-steps", "2", "--output-dir", out)
    assert re.match(rf"autotune: error: {re.escape(str(cfg))}: {key}: ", line), line
    assert not out.exists()


def test_a_number_yaml_reads_as_text_says_how_to_write_it(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("preset: tiny\noptimizer: {lr: 1e-4}\n")  # YAML 1.1: no dot, so a string
    assert _error_line(capsys, "train", "--config", cfg) == (
        f"autotune: error: {cfg}: optimizer.lr: '1e-4' has the wrong type; allowed: a number "
        "(YAML reads 1e-4 as text; write 1.0e-4)"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "workload: nonexist_wl\npreset: tiny\nmodel: {skip_dead_work: true}\n",
            # the known workloads: the built-in ones, and those tests in this process registered
            "model.skip_dead_work: unknown key, as workload 'nonexist_wl' is unknown (known "
            "workloads: [",
        ),
        ("workload: nonexist_wl\npreset: tiny\n", "workload 'nonexist_wl' is unknown; known"),
        ("workload: gr00t_n17\npreset: huge\n", "preset 'huge' of workload 'gr00t_n17' is unknown"),
    ],
    ids=["misspelt-workload-with-model-knobs", "unknown-workload", "unknown-preset"],
)
def test_trainer_args_of_a_config_naming_no_workload_it_knows_is_one_line(
    tmp_path, capsys, text, message
):
    """A misspelt workload was refused for its first model knob (or, without one, printed the
    arguments of a model that does not exist)."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    line = _error_line(capsys, "trainer-args", "--config", cfg)
    assert line.startswith(f"autotune: error: {cfg}: {message}"), line
    assert "'gr00t_n17'" in line


@pytest.mark.parametrize("command", ["run", "train"])
@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "--dataset: '' is not a path; give a file or folder"),
        ("s3://key:secret_42x@bucket/ds", "--dataset: 's3://key:***@bucket/ds' is a URL; allowed: a local folder"),
    ],
    ids=["empty", "url"],
)  # fmt: skip
def test_a_dataset_that_is_no_folder_is_refused_at_the_command_line(
    tmp_path, capsys, monkeypatch, command, value, message
):
    """``--dataset ""`` (an unset variable) read as the current folder; a URL as a folder ``s3:``."""
    monkeypatch.chdir(tmp_path)
    line = _error_line(capsys, command, "--dataset", value, "--steps", "1")
    assert line.startswith(f"autotune: error: {message}"), line
    assert not any(tmp_path.iterdir())
