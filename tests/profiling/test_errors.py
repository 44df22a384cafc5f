"""Bad input is a TraceFormatError naming the file and what is wrong; the CLI prints one line."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from autotune.cli import main
from autotune.errors import TraceFormatError
from autotune.profiling import classify, load_trace
from autotune.profiling.synth import TraceBuilder

DATA = Path(__file__).parent / "data"


def one_step(**meta) -> TraceBuilder:
    b = TraceBuilder(**meta)
    b.step(1, 0, 10)
    b.op("aten::mm", 1, 5)
    return b


def test_truncated_gzip(tmp_path):
    raw = (DATA / "gpu_basic.json.gz").read_bytes()
    bad = tmp_path / "cut.json.gz"
    bad.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(TraceFormatError, match=r"cut\.json\.gz: cannot read the gzip stream"):
        load_trace(bad)


def test_truncated_json(tmp_path):
    text = gzip.decompress((DATA / "gpu_basic.json.gz").read_bytes()).decode()
    bad = tmp_path / "cut.json"
    bad.write_text(text[: len(text) * 2 // 3])
    with pytest.raises(TraceFormatError, match=r"cut\.json: not a complete JSON trace .*truncated"):
        load_trace(bad)


def test_not_json(tmp_path):
    bad = tmp_path / "notes.json"
    bad.write_text("step times: 1.2 ms\n")
    with pytest.raises(TraceFormatError, match=r"notes\.json: not a complete JSON trace"):
        load_trace(bad)


def test_json_without_events(tmp_path):
    bad = tmp_path / "other.json"
    bad.write_text(json.dumps({"schemaVersion": 1, "traces": []}))
    with pytest.raises(TraceFormatError, match=r"other\.json: no 'traceEvents' list"):
        load_trace(bad)


def test_malformed_event(tmp_path):
    bad = tmp_path / "odd.json"
    bad.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a"}]}))
    with pytest.raises(TraceFormatError, match=r"odd\.json: malformed event"):
        load_trace(bad)


def test_no_step_markers(tmp_path):
    b = TraceBuilder()
    b.op("aten::mm", 0, 5)
    path = b.write(tmp_path / "nosteps.json")
    with pytest.raises(TraceFormatError, match=r"nosteps\.json: no ProfilerStep#N markers"):
        classify(path)


def test_empty_folder(tmp_path):
    with pytest.raises(TraceFormatError, match=r"no trace files .* in this folder"):
        classify(tmp_path)


def test_missing_path_and_wrong_suffix(tmp_path):
    with pytest.raises(TraceFormatError, match=r"nothere: no such file or folder"):
        classify(tmp_path / "nothere")
    (tmp_path / "trace.txt").write_text("{}")
    with pytest.raises(TraceFormatError, match=r"trace\.txt: not a trace file"):
        classify(tmp_path / "trace.txt")


def test_two_run_ids_in_one_folder(tmp_path):
    one_step(rank=0, world_size=2, run_id="a").write(tmp_path / "rank0.json")
    one_step(rank=1, world_size=2, run_id="b").write(tmp_path / "rank1.json")
    with pytest.raises(
        TraceFormatError, match=r"rank1\.json: run id 'b' differs from 'a' .*two runs"
    ):
        classify(tmp_path)


def test_two_world_sizes_in_one_folder(tmp_path):
    one_step(rank=0, world_size=2).write(tmp_path / "rank0.json")
    one_step(rank=1, world_size=4).write(tmp_path / "rank1.json")
    with pytest.raises(TraceFormatError, match=r"rank1\.json: world size 4 differs from 2"):
        classify(tmp_path)


def test_duplicate_ranks(tmp_path):
    one_step(rank=0, world_size=2, run_id="a").write(tmp_path / "first.json.gz")
    one_step(rank=0, world_size=2, run_id="a").write(tmp_path / "second.json.gz")
    with pytest.raises(TraceFormatError, match=r"second\.json\.gz: rank 0 also in first\.json\.gz"):
        classify(tmp_path)


def test_cli_prints_one_line_and_fails(tmp_path, capsys):
    shutil.copy(DATA / "cpu_only.json.gz", tmp_path / "rank0.json.gz")
    (tmp_path / "rank1.json").write_text('{"traceEvents": [')
    code = main(["classify", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code != 0
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("autotune: error: ") and "rank1.json: not a complete JSON trace" in err


def _one_op(**fields) -> dict:
    """A trace of one step holding one operator whose fields are replaced by ``fields``."""
    op = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "tid": 1, "ts": 10, "dur": 5}
    op.update(fields)
    step = {
        "ph": "X",
        "cat": "user_annotation",
        "name": "ProfilerStep#1",
        "tid": 1,
        "ts": 0,
        "dur": 100,
    }
    return {"traceEvents": [step, op]}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"args": [1]}, "'args' is [1]; allowed: an object"),
        ({"name": 5}, "'name' is 5; allowed: a string"),
        ({"name": None}, "'name' is None; allowed: a string"),
        ({"ts": "12"}, "'ts' is '12'; allowed: a number of microseconds"),
        ({"ts": 10**400}, f"'ts' is {str(10**400)[:57]}...; allowed: a number of microseconds below 5e+15"),
        ({"tid": 10**30}, f"'tid' is {10**30}; allowed: a 64-bit integer"),
        ({"args": {"correlation": -(10**30)}}, f"'args.correlation' is {-(10**30)}; allowed: a 64-bit integer"),
        ({"cat": ["cpu_op"]}, "'cat' is ['cpu_op']; allowed: a string"),
    ],
    ids=["args-list", "name-int", "name-null", "ts-string", "ts-huge-int", "tid-huge", "corr-huge", "cat-list"],
)  # fmt: skip
def test_an_event_field_of_another_type_or_range_is_named(tmp_path, fields, message):
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(_one_op(**fields)))
    with pytest.raises(
        TraceFormatError, match=r"odd\.json: malformed event near character \d+ \((.*)\)$"
    ) as exc:
        classify(path)
    assert exc.value.args[0].endswith(f"({message})")


@pytest.mark.parametrize("fields", [{"ts": 1e300}, {"dur": 1e300}], ids=["ts", "dur"])
def test_a_time_past_int64_nanoseconds_is_refused_not_wrapped(tmp_path, fields):
    path = tmp_path / "far.json"
    path.write_text(json.dumps(_one_op(**fields)))
    with pytest.raises(
        TraceFormatError, match=r"far\.json: event 'aten::mm' .* has a time past 5e\+15 us"
    ):
        classify(path)


def test_a_byte_order_mark_is_read_past(tmp_path):
    plain, marked = tmp_path / "plain.json", tmp_path / "bom.json"
    plain.write_text(json.dumps(_one_op()))
    marked.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    assert classify(marked).ranks[0].steps == classify(plain).ranks[0].steps


@pytest.mark.parametrize("which", [0, 1], ids=["step", "operator"])
def test_a_complete_event_without_a_duration_is_named(tmp_path, which):
    """A step without ``dur`` was read as a step of no time: the steps' averages fell by its share."""
    trace = _one_op()
    del trace["traceEvents"][which]["dur"]
    path = tmp_path / "nodur.json"
    path.write_text(json.dumps(trace))
    with pytest.raises(TraceFormatError) as exc:
        classify(path)
    assert exc.value.args[0].endswith("('dur' is missing; a complete event (ph X) has one)")


def test_a_duration_that_is_not_a_number_is_named_so(tmp_path):
    path = tmp_path / "nan.json"
    path.write_text(json.dumps(_one_op(dur=float("nan"))))
    with pytest.raises(
        TraceFormatError, match=r"event 'aten::mm' .* has no finite duration \(nan\)"
    ):
        classify(path)


@pytest.mark.parametrize("digits", [20, 5000])
def test_a_step_number_past_int64_is_named(tmp_path, capsys, digits):
    """ProfilerStep# with 5000 digits was a ValueError traceback (Python's int() digit limit)."""
    trace = _one_op()
    trace["traceEvents"][0]["name"] = "ProfilerStep#" + "9" * digits
    path = tmp_path / "steps.json"
    path.write_text(json.dumps(trace))
    assert main(["classify", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert "steps.json: step marker 'ProfilerStep#999" in err
    assert err.endswith(
        "has a step number past 2**63; allowed: ProfilerStep#N with N below 2**63\n"
    )
