"""The campaign helper that runs work detached across device calls: start, wait, pack."""

from __future__ import annotations

import json
import os
import signal
import tarfile

from autotune.benchmarks import campaign


def test_a_module_started_detached_is_waited_for_and_packed(tmp_path, capsys):
    d, out = tmp_path / "camp", tmp_path / "out"
    assert campaign.main(["start", "probe", "--dir", str(d), "--module", "zipfile", "--", "-h"]) == 0
    assert "-m zipfile -h" in (d / "probe.cmd").read_text()
    assert campaign.main(["wait", "probe", "--dir", str(d), "--seconds", "60", "--every", "1"]) == 0
    assert "probe done" in capsys.readouterr().out
    assert "zipfile" in (d / "probe.log").read_text()  # the module's own usage, in its log
    (d / "probe").mkdir()
    (d / "probe" / "rank0.pt.trace.json.gz").write_bytes(b"x" * 10)
    assert campaign.main(["pack", "--dir", str(d), "--out", str(out), "--name", "c1", "--traces", "1"]) == 0
    with tarfile.open(out / "c1.tar.gz") as tar:
        names = tar.getnames()
    assert any(n.endswith("probe.log") for n in names) and not any(n.endswith(".gz") for n in names)
    assert json.loads((out / "c1-traces.json").read_text())[0]["file"] == "probe__rank0.pt.trace.json.gz"


def test_wait_says_by_its_exit_status_whether_the_work_is_still_running(tmp_path, capsys):
    d = tmp_path / "camp"
    assert campaign.main(["start", "slow", "--dir", str(d), "--module", "timeit", "--", "-n", "1",
                          "import time; time.sleep(30)"]) == 0
    pid = int((d / "slow.pid").read_text())
    try:
        assert campaign.main(["wait", "slow", "--dir", str(d), "--seconds", "1", "--every", "1"]) == campaign.STILL_RUNNING
        assert "still running after 1 s" in capsys.readouterr().out
    finally:
        os.kill(pid, signal.SIGKILL)
    # killed, it is a zombie of this process until reaped: finished all the same
    assert campaign.main(["wait", "slow", "--dir", str(d), "--seconds", "10", "--every", "1"]) == 0
