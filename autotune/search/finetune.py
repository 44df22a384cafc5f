"""What a finished study hands the user: the fine-tuning command of its ``best.yaml``.

The study's trials measure a few steps of each configuration; the job that uses the winner is
``autotune train --max-steps N --output-dir DIR`` (:mod:`autotune.train.job`), with checkpoints,
resume and metrics. ``run`` prints its command last and the report shows the same one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_STEPS = 20000
"""The steps the printed command trains (the README's fine-tuning example); the user sets their own."""
SAVE_STEPS = 1000


@dataclass(frozen=True)
class Finetune:
    """The fine-tuning command of a run folder's best.yaml, and how long it would take."""

    command: str
    hint: str
    """The options a user may add (released weights, other data) and the job's expected duration."""

    def lines(self) -> list[str]:
        """What ``run`` prints last: the command alone on the last line, to copy."""
        return [f"fine-tune with it ({self.hint}):", f"  {self.command}"]


def finetune(best: Path, provenance: dict[str, Any] | None = None) -> Finetune:
    """The command that fine-tunes with ``best`` (an absolute path, so that it runs from any folder);
    ``provenance``: best.yaml's, whose step time gives the job's duration at the study's speed."""
    best = Path(best).resolve()
    out = best.parent / "finetune"
    command = (
        f"python -m autotune train --config {best} --max-steps {MAX_STEPS} "
        f"--save-steps {SAVE_STEPS} --output-dir {out}"
    )
    hint = "add --init-from DIR to start from released weights, --dataset DIR to train on a LeRobot dataset"
    step_ms = (provenance or {}).get("step_time_ms")
    # a number, not text a hand put there
    if type(step_ms) in (int, float) and math.isfinite(step_ms) and step_ms > 0:
        hint = f"{MAX_STEPS} steps: ~{_duration(MAX_STEPS * step_ms / 1e3)} at the study's {step_ms / 1e3:.2f} s a step; {hint}"
    return Finetune(command, hint)


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min"
