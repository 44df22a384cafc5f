"""A trial's log file in a run folder handed over: written as a file of its own, never through a link
or another name of someone's file that sits under its name."""

from __future__ import annotations

import os

from autotune.train.trial.logpump import LogPump


def _write_log(path, text: bytes) -> None:
    pump = LogPump(path)
    pump.writer.write(text)
    pump.started()
    pump.close()


def test_a_log_whose_name_is_a_link_or_a_hard_link_replaces_it(tmp_path):
    theirs = tmp_path / "precious.txt"
    theirs.write_text("precious\n")
    logs = tmp_path / "run" / "logs"
    logs.mkdir(parents=True)
    (logs / "trial-0002.log").symlink_to(theirs)
    os.link(theirs, logs / "trial-0003.log")

    for name in ("trial-0002.log", "trial-0003.log"):
        _write_log(logs / name, b"the trial's output\n")
        assert not (logs / name).is_symlink()
        assert (logs / name).read_text() == "the trial's output\n"
    assert theirs.read_text() == "precious\n" and theirs.stat().st_nlink == 1
