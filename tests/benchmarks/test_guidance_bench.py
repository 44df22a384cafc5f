"""The guidance benchmark's trials-to-fraction arithmetic, on lists and on a real tiny study."""

from __future__ import annotations

import pytest

from autotune.benchmarks.guidance import StudyRun, study_values, summarize, trials_to_fraction
from autotune.cli import main


def test_trials_to_fraction_counts_every_trial_and_none_when_never_reached():
    values = [50.0, None, 80.0, 70.0, 96.0]  # None: pruned, failed or infeasible
    assert trials_to_fraction(values, 100.0, 0.5) == 1
    assert trials_to_fraction(values, 100.0, 0.8) == 3
    assert trials_to_fraction(values, 100.0, 0.95) == 5
    assert trials_to_fraction(values, 100.0, 0.99) is None
    assert trials_to_fraction([None, None], 100.0, 0.1) is None


def test_summary_uses_one_reference_across_studies_and_counts_misses_as_trials_plus_one():
    runs = [
        StudyRun(0, "guided", "a", 10.0, [60.0, 100.0]),
        StudyRun(0, "unguided", "b", 12.0, [60.0, 80.0]),
        StudyRun(1, "guided", "c", 11.0, [95.0, 70.0]),
        StudyRun(1, "unguided", "d", 14.0, [None, 91.0]),
    ]
    summary = summarize(runs, [0.9, 0.95], trials=2)
    assert summary["reference_samples_per_s"] == 100.0
    guided, unguided = summary["modes"]["guided"], summary["modes"]["unguided"]
    assert guided["trials_to_90%"] == [2, 1] and guided["median_to_90%"] == 1.5
    assert (
        unguided["trials_to_90%"] == [None, 2] and unguided["median_to_90%"] == 2.5
    )  # the miss counts as 3
    assert unguided["trials_to_95%"] == [None, None] and unguided["reached_95%"] == 0
    assert guided["wall_s_median"] == 10.5 and unguided["best_median"] == 85.5


@pytest.mark.slow
def test_values_of_a_real_study_in_trial_order(tmp_path):
    out = tmp_path / "run"
    assert (
        main(
            [
                "run",
                "--space",
                "quick",
                "--trials",
                "2",
                "--synthetic",
                "--confirm-rounds",
                "0",
                "--steps",
                "2",
                "--warmup",
                "1",
                "--batch-size",
                "2",
                "--profile-steps",
                "0",
                "--no-prune",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    values, stages = study_values(out)
    assert len(values) == 2 and all(v is not None and v > 0 for v in values)
    assert stages and stages[0].endswith("-> all")  # no profile: nothing to guide by, a free stage
    best = max(values)
    assert trials_to_fraction(values, best, 1.0) == values.index(best) + 1
