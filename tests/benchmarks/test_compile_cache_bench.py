"""``python -m autotune.benchmarks.compile_cache``: a bad input is one line before any run."""

from __future__ import annotations

import pytest

from autotune.benchmarks.compile_cache import main


@pytest.mark.parametrize(
    "extra, line",
    [
        (["--set", "nonsense"], "--set: 'nonsense' is not KEY=VALUE (e.g. compile.regions=[all])"),
        (["--json", "{tmp}"], "--json {tmp}: is a folder; give the file to write (e.g. {tmp}/result.json)"),
        (["--json", "{tmp}/a/x.json"], "--json {tmp}/a: is a file, not a folder; give a folder "
         "(it is created if needed)"),
    ],
)  # fmt: skip
def test_a_bad_input_is_one_line_before_any_run(tmp_path, capsys, extra, line):
    """--set named --reference (run's flag) in a traceback; a --json that cannot be written failed
    only after every round had compiled, with a traceback, the measurements lost."""
    (tmp_path / "a").write_text("a file where a folder is named")
    extra = [e.format(tmp=tmp_path) for e in extra]
    assert main(["--preset", "tiny", *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"compile_cache: error: {line.format(tmp=tmp_path)}"]
