"""What the run folder keeps as the study goes on: ``diagnosis.json`` after each trial, and the
profiles' traces of the trials a reader looks at. Traces are kept for the stock trial, the
incumbents the stages started from and the best trial; the other trials keep their
``classification.summary``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna

from autotune.search.converge import Convergence
from autotune.search.guide import Guide
from autotune.search.trials import STOCK, best_trial
from autotune.search.vet import Reference


def keep_traces(study: optuna.Study, guide: Guide, out: Path) -> None:
    """Delete the traces of trials that are neither stock, a stage's incumbent, nor the best."""
    keep = {t.number for t in study.get_trials(deepcopy=False) if t.user_attrs.get(STOCK)}
    keep |= {s.incumbent for s in guide.stages}
    best = best_trial(study)
    if best is not None:
        keep.add(best.number)
    for folder in (out / "profiles").glob("trial-*"):
        number = folder.name.removeprefix("trial-")
        # only the folders trials made: a link there (in a folder handed over) leads to files
        # that are no trace of this study, and a name no trial has is not one of them either
        if (
            not number.isdigit()
            or int(number) in keep
            or folder.is_symlink()
            or not folder.is_dir()
        ):
            continue
        for trace in folder.glob("*.json*"):
            trace.unlink(missing_ok=True)


def write_diagnosis(
    out: Path,
    guide: Guide,
    converged: Convergence | None = None,
    prediction: dict[str, Any] | None = None,
    reference: Reference | None = None,
) -> None:
    """``diagnosis.json``: the guide's stages, the convergence, under a memory budget how the
    predicted peaks matched the measured ones (:func:`autotune.search.predict.accuracy`), and the
    loss-parity reference (:func:`autotune.search.vet.parity_reference`; None: none yet)."""
    from autotune.config.io import write_text_atomic

    data = {
        **guide.to_dict(),
        "converged": converged.to_dict() if converged is not None else None,
        "parity_reference": reference.to_dict() if reference is not None else None,
    }
    if prediction is not None:
        data["memory_prediction"] = prediction
    write_text_atomic(out / "diagnosis.json", json.dumps(data, indent=1))
