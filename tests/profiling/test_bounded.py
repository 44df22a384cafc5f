"""A trace is read with a type and a size bound: a link to /dev/zero and a file cut short and padded
with gigabytes of zeros fail fast, with one line, instead of being read whole."""

from __future__ import annotations

import os
import time

import pytest

from autotune.cli import main
from autotune.errors import TraceFormatError
from autotune.profiling.trace import load_trace

HEAD = '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1.0, "dur": 2.0}, '


def _fails_fast(path, capsys, expected: str) -> None:
    start = time.monotonic()
    with pytest.raises(TraceFormatError) as exc:
        load_trace(path)
    assert str(exc.value) == expected
    assert main(["classify", str(path)]) == 2
    assert capsys.readouterr().err == f"autotune: error: {expected}\n"
    assert time.monotonic() - start < 10


@pytest.mark.parametrize("cut", [HEAD, HEAD[:-2], HEAD[:-10]], ids=["after", "between", "inside"])
def test_a_trace_padded_with_gigabytes_of_zeros_fails_at_the_first_zero(tmp_path, capsys, cut):
    path = tmp_path / "rank0.json"
    path.write_text(cut)
    os.truncate(path, 4 << 30)  # sparse: no disk used
    _fails_fast(
        path,
        capsys,
        f"{path}: not a complete JSON trace (a NUL byte at character {len(cut)}; truncated or corrupt?)",
    )


def test_a_trace_linked_to_dev_zero_is_not_read(tmp_path, capsys):
    path = tmp_path / "rank0.json"
    os.symlink("/dev/zero", path)
    _fails_fast(
        path, capsys, f"{path}: not a regular file (a device, pipe or socket); expected a file"
    )


def test_one_value_longer_than_the_bound_is_refused_without_reading_on(tmp_path, monkeypatch):
    """An event that never ends is not read to the end of the file (each retry rescans the buffer)."""
    from autotune.profiling import trace

    reads = []
    read = trace._Reader._read
    monkeypatch.setattr(trace._Reader, "CHUNK", 1024)
    monkeypatch.setattr(trace._Reader, "MAX_VALUE", 4096)
    monkeypatch.setattr(trace._Reader, "_read", lambda self: reads.append(1) or read(self))
    path = tmp_path / "rank0.json"
    path.write_text('{"traceEvents": [{"name": "' + "x" * 100_000)
    with pytest.raises(TraceFormatError, match="not a complete JSON trace"):
        load_trace(path)
    assert len(reads) < 10  # 100 chunks of 1024 without the bound


@pytest.mark.parametrize(
    "value, why",
    [("[" * 200_000 + "]" * 200_000, "RecursionError"), ("9" * 5000, "ValueError: Exceeds")],
)
def test_a_value_python_cannot_parse_is_one_line(tmp_path, capsys, value, why):
    """Nested past the stack, or a number of thousands of digits: the trace is refused, no traceback."""
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [{"ph": "X", "ts": ' + value + "}]}")
    assert main(["classify", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(
        f"autotune: error: {path}: not a complete JSON trace (an unreadable value ({why}"
    )
