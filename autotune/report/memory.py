"""The report's memory section: each memory-stage trial's peak against the budget, and how the peaks
predicted before trials ran (:mod:`autotune.search.predict`) matched the measured ones, as
``diagnosis.json`` has them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class PredictedPeak:
    """One trial that ran with a prediction: predicted against measured peak."""

    trial: int
    predicted_bytes: int
    measured_bytes: int
    error: float
    """(predicted - measured) / measured."""
    exact: bool = True
    """False: the measured peak is where CUDA refused an allocation, below the run's need."""
    at_least: bool = False
    """The prediction was a lower bound only (the static bytes): it held if the peak reached it."""

    @property
    def held(self) -> bool:
        """The peak reached the bound, or CUDA refused an allocation first (the run needed more
        than the budget: no sign the bound was too high)."""
        return self.measured_bytes >= self.predicted_bytes or not self.exact


@dataclass
class SkippedTrial:
    """A trial not run: its predicted peak was over the budget by more than the margin."""

    trial: int
    peak_bytes: int
    budget_bytes: int | None = None
    basis: str = ""
    at_least: bool = False


@dataclass
class MemoryPrediction:
    margin: float
    trials: list[PredictedPeak] = field(default_factory=list)
    skipped: list[SkippedTrial] = field(default_factory=list)
    median_abs_error: float | None = None
    max_abs_error: float | None = None

    @property
    def bounds(self) -> list[PredictedPeak]:
        """The trials that ran with a lower bound only."""
        return [t for t in self.trials if t.at_least]

    @classmethod
    def from_dict(cls, data: Any) -> MemoryPrediction | None:
        """The diagnosis's ``memory_prediction`` (None where the run has none or another shape)."""
        if not isinstance(data, dict) or "margin" not in data:
            return None
        try:
            return cls(
                margin=float(data["margin"]),
                trials=[PredictedPeak(**_only(PredictedPeak, r)) for r in data.get("trials", [])],
                skipped=[SkippedTrial(**_only(SkippedTrial, r)) for r in data.get("skipped", [])],
                median_abs_error=data.get("median_abs_error"),
                max_abs_error=data.get("max_abs_error"),
            )
        except (TypeError, ValueError):  # another version's record: the page goes without it
            return None


def _only(cls: type, row: dict[str, Any]) -> dict[str, Any]:
    names = cls.__dataclass_fields__
    return {k: v for k, v in row.items() if k in names}
