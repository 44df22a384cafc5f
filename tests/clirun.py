"""Run ``python -m autotune ...`` in a real process and check a user error's one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def autotune(
    *args: str, cwd: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "autotune", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd or ROOT, env=env, timeout=timeout)  # fmt: skip


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    """The error line of a failed command, after checking it is one line without a traceback."""
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("autotune: error: "), proc.stderr
    return lines[0]
