"""Search spaces: the shipped ones load, bad files fail by message, knobs apply to a TrainConfig."""

from __future__ import annotations

import re

import pytest

from autotune.config import TrainConfig
from autotune.config.compat import Machine
from autotune.errors import ConfigError, SearchSpaceError
from autotune.search import apply_values, list_spaces, load_space, parse_bytes


def write(tmp_path, text: str):
    path = tmp_path / "x.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", ["quick", "gr00t_n16"])
def test_shipped_spaces_load_and_contain_the_stock_config(name):
    space = load_space(name)
    assert space.name == name and space.knobs
    params = space.stock_params(TrainConfig(preset="tiny", batch_size=2))
    assert set(params) <= {k.key for k in space.knobs}


def test_list_spaces_finds_the_shipped_ones():
    assert {"quick", "gr00t_n16"} <= set(list_spaces())


def test_full_space_has_the_hand_tuned_knobs():
    keys = {k.key for k in load_space("gr00t_n16").knobs}
    for key in (
        "ddp.static_graph",
        "graphs.mode",
        "ddp.bucket_cap_mb",
        "ddp.comm_hook",
        "optimizer.impl",
        "data.num_workers",
        "data.multiprocessing_context",
        "data.device_prefetch",
        "kernels.cuda_device_max_connections",
        "compile.regions",
        "checkpointing.regions",
        "kernels.attention",
        "precision.regions.dit",
    ):
        assert key in keys
    bucket = next(k for k in load_space("gr00t_n16").knobs if k.key == "ddp.bucket_cap_mb")
    assert bucket.high == 400


def test_cuda_knobs_are_dropped_on_cpu_with_a_note():
    space, notes = load_space("gr00t_n16").for_machine(Machine(cuda=False))
    keys = {k.key for k in space.knobs}
    assert (
        "graphs.mode" not in keys
        and "graphs.regions" not in keys
        and "data.device_prefetch" not in keys
    )
    # conditional on graphs.mode, dropped: kept where its value on this machine (none) meets the condition
    kept = {k.key: k for k in space.knobs}
    assert kept["ddp.static_graph"].when == {} and kept["ddp.gradient_as_bucket_view"].when == {}
    assert "ddp.graph_overlap" not in kept and "graphs.regions" not in kept
    assert any("graphs.mode: dropped, needs cuda" in n for n in notes)
    gpu, _ = load_space("gr00t_n16").for_machine(Machine(cuda=True, capability=(9, 0)))
    assert "graphs.mode" in {k.key for k in gpu.knobs}


def test_loader_knobs_are_dropped_where_the_run_reads_no_dataset():
    """Synthetic batches are made in the training process: no loader knob changes a step, so
    trials that differ in them only would measure noise (the auto space leaves them out too)."""
    h200 = Machine(cuda=True, capability=(9, 0), cpus=16)
    space, notes = load_space("gr00t_n17").for_machine(h200, loads_data=False)
    keys = {k.key for k in space.knobs}
    assert not {k for k in keys if k.startswith("data.")}
    assert "data.num_workers: dropped, the run reads no dataset (synthetic batches)" in notes
    assert "optimizer.impl" in keys and "compile.regions" in keys
    full, _ = load_space("gr00t_n17").for_machine(h200)
    assert {"data.num_workers", "data.prefetch_factor"} <= {k.key for k in full.knobs}


def test_unknown_space_name_lists_the_known_ones():
    with pytest.raises(SearchSpaceError, match=r"'nope' is unknown; known spaces: \[.*'quick'"):
        load_space("nope")


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (
            "knobs: {ddp.bucket_cap_mb: {type: float, low: 500, high: 100, group: comm}}",
            r"x.yaml: knobs.ddp.bucket_cap_mb.low: low <= high must hold",
        ),
        (
            "knobs: {ddp.bucket_cap_mb: {type: float, low: 1, high: 9000, group: comm}}",
            r"knobs.ddp.bucket_cap_mb: 9000 is not a valid value .*at most 4096",
        ),
        (
            "knobs: {ddp.bucket_size: {type: float, low: 1, high: 2, group: comm}}",
            r"knobs.ddp.bucket_size: not a knob of the training configuration; allowed at this level: \[.*'bucket_cap_mb'",
        ),
        ("knobs: {ddp: {type: bool, group: comm}}", r"knobs.ddp: names a section"),
        (
            "knobs: {ddp.static_graph: {type: bool, group: speed}}",
            r"knobs.ddp.static_graph.group: 'speed' is not one of",
        ),
        (
            "knobs: {ddp.static_graph: {type: boolean, group: comm}}",
            r"knobs.ddp.static_graph.type: 'boolean' is not one of",
        ),
        (
            "knobs: {optimizer.impl: {type: categorical, choices: [foreach, fastest], group: optimizer}}",
            r"knobs.optimizer.impl: 'fastest' is not a valid value",
        ),
        (
            "knobs: {data.num_workers: {type: int, low: 0, high: 2.5, group: data}}",
            r"knobs.data.num_workers.high: 2.5 has the wrong type",
        ),
        (
            "knobs: {data.num_workers: {type: int, low: 0, high: 2, group: data, color: red}}",
            r"knobs.data.num_workers.color: unknown key",
        ),
        (
            "knobs: {graphs.regions: {type: categorical, choices: [[dit]], when: {graphs.mode: regions}, group: graphs}}",
            r"knobs.graphs.regions.when.graphs.mode: not a knob listed before this one",
        ),
        (
            "knobs: {data.num_workers: {type: int, low: 0, high: 2, group: data, requires: tpu}}",
            r"requires: 'tpu' is not one of",
        ),
        ("knobs: [1, 2]", r"x.yaml: knobs: \[1, 2\] is not allowed"),
        # the name goes into the study's name and its default folder, runs/WORKLOAD-PRESET-NAME
        (
            "name: ../../../elsewhere\nknobs: {optimizer.impl: {}}",
            r"x.yaml: name: '../../../elsewhere' is not allowed; allowed: letters, digits, '_', '.' "
            r"and '-'",
        ),
        ("name: [a]\nknobs: {optimizer.impl: {}}", r"x.yaml: name: \['a'\] is not allowed"),
        ("knobs: {a: [}", r"x.yaml: not valid YAML"),
    ],
)
def test_bad_space_files_fail_naming_file_and_key(tmp_path, text, match):
    with pytest.raises(SearchSpaceError, match=match):
        load_space(write(tmp_path, text))


def test_a_long_value_in_a_space_file_is_quoted_short(tmp_path):
    """A 5,000-character value made a 5,000-character error line."""
    text = "knobs: {optimizer.impl: {type: categorical, group: optimizer, choices: %s}}" % (
        "a" * 5000
    )
    with pytest.raises(SearchSpaceError, match=r"choices: 'a+\.\.\. is not allowed") as err:
        load_space(write(tmp_path, text))
    assert len(str(err.value)) < 300


def test_stock_value_outside_the_space_is_refused(tmp_path):
    space = load_space(
        write(tmp_path, "knobs: {data.num_workers: {type: int, low: 4, high: 8, group: data}}")
    )
    with pytest.raises(
        SearchSpaceError, match=r"knobs.data.num_workers: the stock value 2 is outside the space"
    ):
        space.stock_params(TrainConfig())


def test_a_run_whose_space_leaves_out_the_stock_value_writes_nothing(tmp_path, capsys):
    from autotune.cli import main

    space = write(tmp_path, "knobs: {optimizer.impl: {type: categorical, choices: [fused, loop]}}")
    out = tmp_path / "run"
    argv = ["run", "--space", str(space), "--synthetic", "--trials", "2", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"autotune: error: {space}: knobs.optimizer.impl: the stock value 'foreach' is outside the "
        "space; the stock configuration is the first trial, so the space must contain it"
    ], err
    assert not (out / "study.journal").exists() and not (out / "run.json").exists()


def test_conditional_knob_only_when_its_condition_holds(tmp_path):
    space = load_space(
        write(
            tmp_path,
            """
knobs:
  graphs.mode: {type: categorical, choices: [none, regions], group: graphs}
  graphs.regions: {type: categorical, choices: [[dit], [dit, vision]], when: {graphs.mode: regions}, group: graphs}
""",
        )
    )
    regions = space.knobs[1]
    assert not regions.active({"graphs.mode": "none"}) and regions.active(
        {"graphs.mode": "regions"}
    )
    assert regions.encode(["dit", "vision"]) == "dit+vision" and regions.decode("dit+vision") == [
        "dit",
        "vision",
    ]
    assert space.stock_params(TrainConfig()) == {"graphs.mode": "none"}


def test_apply_values_sets_dotted_keys_and_validates():
    cfg = apply_values(
        TrainConfig(),
        {"ddp.bucket_cap_mb": 400.0, "precision.regions.dit": "fp32", "compile.regions": ["dit"]},
    )
    assert (
        cfg.ddp.bucket_cap_mb == 400.0
        and cfg.precision.regions == {"dit": "fp32"}
        and cfg.compile.regions == ["dit"]
    )
    with pytest.raises(
        ConfigError, match=r"data.prefetch_factor: 2 is set; allowed: null when num_workers is 0"
    ):
        apply_values(TrainConfig(), {"data.num_workers": 0, "data.prefetch_factor": 2})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("80GiB", 80 * 2**30),
        ("64 GB", 64 * 10**9),
        ("1.5e9", 1_500_000_000),
        ("1024", 1024),
        ("512mib", 512 * 2**20),
    ],
)
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["80 gigs", "", "-1GB", "GiB", "0"])
def test_bad_memory_budget(text):
    with pytest.raises(ConfigError, match=r"--memory-budget: .* (is not a size|is out of range)"):
        parse_bytes(text)


@pytest.mark.parametrize(
    ("cpus", "world", "workers"),
    [(16, 1, 14), (32, 2, 14), (2, 1, 0), (128, 1, 16), (None, 1, None)],
)
def test_cores_remedy_gives_each_rank_the_cores_it_has(cpus, world, workers):
    def remedy_of(space):
        return next(k.remedy for k in space.knobs if k.key == "data.num_workers")

    raw = load_space("gr00t_n16")
    assert remedy_of(raw) == "cores"
    remedy = remedy_of(
        raw.for_machine(Machine(cuda=True, capability=(9, 0), world_size=world, cpus=cpus))[0]
    )
    if workers is None:  # unknown affinity: the machine's core count
        import os

        workers = min(16, max(0, (os.cpu_count() or 1) - 2))
    assert remedy == workers


def test_cores_remedy_only_for_int_knobs(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: s\nknobs:\n  data.pin_memory: {type: bool, group: data, remedy: cores}\n"
    )
    with pytest.raises(SearchSpaceError, match=r"knobs.data.pin_memory.remedy"):
        load_space(str(path))


@pytest.mark.parametrize(
    ("world", "expected"),
    [
        (1, ["all"]),
        (2, ["vision", "connector", "llm_frozen", "llm_trainable", "vlln", "dit", "projectors"]),
    ],
)
def test_compile_remedy_is_the_whole_model_on_one_rank_and_block_by_block_on_several(
    world, expected
):
    space, _ = load_space("gr00t_n16").for_machine(
        Machine(cuda=True, capability=(9, 0), world_size=world, cpus=32)
    )
    knob = next(k for k in space.knobs if k.key == "compile.regions")
    assert knob.remedy == expected and knob.remedy_several_ranks is None


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (
            "remedy_several_ranks: [nowhere]",
            r"knobs.compile.regions.remedy_several_ranks: \['nowhere'\] is not a value",
        ),
        (
            "remedy_several_ranks: null",
            r"knobs.compile.regions.remedy_several_ranks: None is not a value",
        ),
    ],
)
def test_bad_several_ranks_remedy_names_the_key(tmp_path, extra, match):
    text = f"knobs:\n  compile.regions: {{type: categorical, choices: [[], [dit]], group: compile, remedy: [dit], {extra}}}\n"
    with pytest.raises(SearchSpaceError, match=match):
        load_space(write(tmp_path, text))


def test_a_several_ranks_remedy_needs_the_one_rank_remedy(tmp_path):
    text = "knobs:\n  compile.regions: {type: categorical, choices: [[], [dit]], group: compile, remedy_several_ranks: [dit]}\n"
    with pytest.raises(SearchSpaceError, match=r"remedy_several_ranks: needs a remedy"):
        load_space(write(tmp_path, text))


def test_a_knob_named_alone_takes_its_declared_range_up_to_the_cores_ceiling(tmp_path):
    """``data.num_workers: {}`` is the declared knob (workers up to the cores, at most 16): the file
    is not refused for the declaration's ``cores``, and its remedy still follows the machine."""
    space = load_space(write(tmp_path, "knobs:\n  data.num_workers: {}\n"))
    (knob,) = space.knobs
    assert (knob.type, knob.low, knob.high, knob.remedy) == ("int", 0, 16, "cores")
    (mine,) = space.for_machine(Machine(cuda=False, cpus=6))[0].knobs
    assert mine.remedy == 4


@pytest.mark.parametrize(
    ("entry", "match"),
    [
        (
            "data.num_workers: {type: float, low: 0, high: 2, group: data}",
            r"knobs.data.num_workers.type: 'float' does not fit data.num_workers, which holds an "
            r"integer; allowed: 'int', or 'categorical' of integers$",
        ),
        (  # an optional integer
            "data.prefetch_factor: {type: float, low: 2, high: 4, group: data}",
            r"knobs.data.prefetch_factor.type: 'float' does not fit data.prefetch_factor, which "
            r"holds an integer",
        ),
        (
            "ddp.static_graph: {type: int, low: 0, high: 1}",
            r"knobs.ddp.static_graph.type: 'int' does not fit ddp.static_graph, which holds true "
            r"or false; allowed: 'bool', or 'categorical' of true/false$",
        ),
        (
            "data.num_workers: {type: bool}",
            r"knobs.data.num_workers.type: 'bool' does not fit data.num_workers",
        ),
        (  # one entry of a mapping of precisions (names)
            "precision.regions.vision: {type: float, low: 0, high: 1, group: precision}",
            r"knobs.precision.regions.vision.type: 'float' does not fit precision.regions.vision, "
            r"which holds a string; allowed: 'categorical' of strings$",
        ),
        (
            "data.num_workers: {type: categorical, choices: [1.5, 2]}",
            r"knobs.data.num_workers: 1.5 is not a valid value \(data.num_workers: 1.5 has the "
            r"wrong type; allowed: an integer\)",
        ),
        (
            "ddp.static_graph: {type: categorical, choices: [0, 1]}",
            r"knobs.ddp.static_graph: 0 is not a valid value .*allowed: true or false",
        ),
    ],
)
def test_a_knob_type_the_field_cannot_hold_is_refused(tmp_path, entry, match):
    """A float knob on an integer field sampled 1.1 workers: every trial but stock failed, and the
    study's end crashed rebuilding stock from its stored 2.0."""
    with pytest.raises(SearchSpaceError, match=match):
        load_space(write(tmp_path, f"knobs: {{{entry}}}"))


def test_an_int_knob_on_a_number_field_is_allowed(tmp_path):
    space = load_space(
        write(tmp_path, "knobs: {ddp.bucket_cap_mb: {type: int, low: 25, high: 400}}")
    )
    assert space.knobs[0].type == "int" and space.stock_params(TrainConfig()) == {
        "ddp.bucket_cap_mb": 100.0
    }


def test_a_run_whose_knob_type_does_not_fit_is_refused_before_any_trial(tmp_path, capsys):
    from autotune.cli import main

    space = write(
        tmp_path, "knobs: {data.num_workers: {type: float, low: 0, high: 2, group: data}}"
    )
    out = tmp_path / "run"
    argv = [
        "run",
        "--space",
        str(space),
        "--trials",
        "3",
        "--confirm-rounds",
        "0",
        "--out",
        str(out),
    ]
    assert main(argv) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"autotune: error: {space}: knobs.data.num_workers.type: 'float' does not fit "
        "data.num_workers, which holds an integer; allowed: 'int', or 'categorical' of integers"
    ]
    assert not out.exists()


@pytest.mark.parametrize(
    ("entry", "match"),
    [
        (
            "ddp.bucket_cap_mb: {type: float, low: 25, high: 400, step: 50}",
            r"x.yaml: knobs.ddp.bucket_cap_mb.step: 50 steps do not reach high 400 from low 25; "
            r"allowed: high 375 or 425, or a step that divides 375$",
        ),
        (
            "data.num_workers: {type: int, low: 1, high: 2, step: 2}",
            r"knobs.data.num_workers.step: 2 steps do not reach high 2 from low 1; allowed: "
            r"high 1 or 3, or a step that divides 1$",
        ),
        (  # Optuna needs step 1 for an int knob on a log scale, as it refuses any for a float one
            "data.num_workers: {type: int, low: 1, high: 9, step: 2, log: true}",
            r"knobs.data.num_workers.step: cannot be combined with log: true \(an int knob on a "
            r"log scale takes step 1\)$",
        ),
    ],
)
def test_a_step_optuna_would_change_is_refused(tmp_path, entry, match):
    """Optuna shrank a range its step did not tile (a warning), so stock fell off it; an int knob on
    a log scale with a step crashed the run at its first trial."""
    with pytest.raises(SearchSpaceError, match=match):
        load_space(write(tmp_path, f"knobs: {{{entry}}}"))


@pytest.mark.parametrize(
    "entry",
    [
        "ddp.bucket_cap_mb: {type: float, low: 0.1, high: 0.7, step: 0.2}",
        "ddp.bucket_cap_mb: {type: float, low: 25, high: 425, step: 50}",
        "data.num_workers: {type: int, low: 1, high: 8, step: 1, log: true}",
        "data.num_workers: {type: int, low: 0, high: 8, step: 2}",
    ],
)
def test_a_step_that_tiles_the_range_is_accepted(tmp_path, entry):
    load_space(write(tmp_path, f"knobs: {{{entry}}}"))


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        (
            "ddp.bucket_cap_mb: {type: float, low: 30, high: 430, step: 50}",
            "100.0 is outside the space (not 30 plus whole steps of 50)",
        ),
        (
            "data.num_workers: {type: int, low: 1, high: 7, step: 2}",
            "2 is outside the space (not 1 plus whole steps of 2)",
        ),
    ],
)
def test_a_stock_value_off_the_steps_is_outside_the_space(tmp_path, entry, why):
    """Optuna keeps stock's value off the grid, and the report could not copy its trial."""
    space = load_space(write(tmp_path, f"knobs: {{{entry}}}"))
    with pytest.raises(SearchSpaceError, match=re.escape(f"the stock value {why}; the stock")):
        space.stock_params(TrainConfig())


@pytest.mark.parametrize(
    ("entry", "key"),
    [
        ("ddp.bucket_cap_mb: {type: float, low: 25, high: 400, step: 50}", "ddp.bucket_cap_mb"),
        ("data.num_workers: {type: int, low: 1, high: 9, step: 2, log: true}", "data.num_workers"),
    ],
)
def test_a_run_whose_step_optuna_would_change_writes_nothing(tmp_path, capsys, entry, key):
    from autotune.cli import main

    space = write(tmp_path, f"knobs: {{{entry}}}")
    out = tmp_path / "run"
    assert main(["run", "--space", str(space), "--trials", "3", "--out", str(out)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"autotune: error: {space}: knobs.{key}.step: ")
    assert not out.exists()
