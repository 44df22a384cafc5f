"""How far a measurement can be trusted, and when two of them differ by more than noise.

A trial's samples/s is the median of a few steps in one run. Two things make it wrong by more than
its configuration explains: steps that vary a lot (a wide p10-p90 spread: with 3 steps whose spread
was 4x, a custom workload's study once reported 1.70x) and other processes competing for the host
while it ran (the README's CPU study reported 4.03x for a configuration that trains 18 % slower
than stock on a quiet machine). Each measured trial keeps both readings in its record (the step
times' spread and the host's load at its start); :func:`flags` says what is wrong with one, and
the study measures a flagged trial again before the guide may take it as its incumbent.

:func:`margin` is the relative difference two trials must show to count as different: half the
wider p10-p90 spread of the two, and never less than ``NOISE_FLOOR`` (runs of one configuration in
fresh processes differ by a few per cent even on a quiet machine).
"""

from __future__ import annotations

from autotune.train.trial.record import Measurement, TrialRecord

WIDE_SPREAD = 0.2
"""A measured window whose p10-p90 step-time spread exceeds this share of its median step is noisy."""
BUSY = 0.25
"""A run that started while other processes used more than this share of the host's CPUs is noisy."""
NOISE_FLOOR = 0.03
"""The smallest relative difference taken as real between two runs in fresh processes."""


def flags(record: TrialRecord | None) -> list[str]:
    """Why the record's measurement cannot be taken on its word (empty: it can)."""
    if record is None or record.measurement is None:
        return []
    out = []
    spread = record.measurement.step_time.spread
    if spread > WIDE_SPREAD:
        out.append(f"step-time spread {100 * spread:.0f} % of the median")
    if record.host is not None and record.host.others_busy > BUSY:
        out.append(
            f"other processes used {100 * record.host.others_busy:.0f} % of the host's CPUs at its start"
        )
    return out


def noise_of(m: Measurement | None) -> float:
    """The relative uncertainty of one measurement: half its p10-p90 spread, at least ``NOISE_FLOOR``."""
    return NOISE_FLOOR if m is None else max(NOISE_FLOOR, m.step_time.spread / 2)


def margin(a: Measurement | None, b: Measurement | None) -> float:
    """The relative difference two measurements must show to differ by more than their noise."""
    return max(noise_of(a), noise_of(b))


def beats(value: float, other: float, rel_margin: float) -> bool:
    """``value`` is higher than ``other`` by more than ``rel_margin`` of it."""
    return value > other * (1.0 + rel_margin)


def within(value: float, best: float, rel_margin: float) -> bool:
    """``value`` is no lower than ``best`` by more than noise: ``best / (1 + rel_margin)`` or higher (a tie
    within noise, or better).

    The margin is the relative uncertainty of a step time; samples/s is its inverse, so the lowest rate
    the noise explains is ``best / (1 + m)``. ``best * (1 - m)`` would agree for narrow spreads but
    reach zero at ``m`` = 1, where a loader-bound stock whose steps vary 2x would count as a tie with
    anything.
    """
    return value * (1.0 + rel_margin) >= best


def trusted_value(record: TrialRecord) -> float | None:
    """The samples/s to believe of a measured record: the lower of its two runs where it was measured
    again (the second run is there because the first was noisy), else its own; None unmeasured."""
    if record.measurement is None:
        return None
    value = record.measurement.samples_per_s
    again = record.remeasure
    if again is not None and again.measurement is not None:
        value = min(value, again.measurement.samples_per_s)
    return value
