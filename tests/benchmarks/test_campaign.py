"""The campaign helper that runs work detached across device calls: start, wait, pack."""

from __future__ import annotations

import json
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
