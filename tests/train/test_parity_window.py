"""Loss parity's verdict on a window too short to tell two runs' draws apart (``verify.compare``)."""

from dataclasses import dataclass

import pytest

from autotune.train.window.verify import compare, undecided_text
from tests.clirun import autotune


@dataclass
class Run:
    losses: list[float]
    grad_norms: list[float]


STOCK = Run([1.0, 1.3, 0.9], [1.0, 1.1, 0.9])


def test_the_same_draws_pass():
    result = compare(STOCK, STOCK, 0.05)
    assert result.passed and result.decided and result.loss_margin == 0.0


def test_other_draws_whose_means_differ_within_their_noise_are_undecided_not_failed():
    # a compiled region drawing its noise from another generator: per-step values apart both ways
    other = Run([1.2, 1.0, 1.25], [1.05, 0.95, 1.1])
    result = compare(STOCK, other, 0.05)
    assert result.loss_rel_diff > 0.05  # outside the tolerance ...
    assert result.loss_rel_diff - result.loss_margin < 0.05  # ... by less than the noise
    assert not result.passed and not result.decided
    text = undecided_text(result)
    assert text.startswith("3 step(s) too few to judge: loss 7.81 % (± ") and "--steps" in text


def test_a_consistent_difference_fails_on_three_steps():
    # the DiT frozen: every step's gradient norm about half of stock's
    other = Run(STOCK.losses, [0.5, 0.56, 0.44])
    result = compare(STOCK, other, 0.05)
    assert not result.passed and result.decided
    assert result.grad_norm_rel_diff - result.grad_norm_margin > 0.05


@pytest.mark.parametrize("steps, decided", [(3, False), (100, True)])
def test_a_window_long_enough_tells_a_difference_its_spread_hides_on_a_few_steps(steps, decided):
    # every step 10 % above stock's on average, by 30 % or -10 % in turn
    stock = Run([1.0] * steps, [1.0] * steps)
    other = Run([1.1 + 0.2 * (-1) ** i for i in range(steps)], [1.0] * steps)
    result = compare(stock, other, 0.05)
    assert not result.passed and result.decided == decided


@pytest.mark.parametrize("loss", [1.0, 1.2])
def test_one_step_has_no_spread(loss):
    result = compare(Run([1.0], [1.0]), Run([loss], [1.0]), 0.05)
    assert result.loss_margin is None and result.passed == (loss == 1.0)
    assert result.decided == result.passed  # outside the tolerance, one step can't say by how much
    if not result.decided:
        assert "(no spread in one step)" in undecided_text(result)


@pytest.mark.slow
def test_verify_says_which_steps_it_compared(tmp_path):
    """``verify --steps 2`` said "over 3 steps": each run's warm-up step is compared too."""
    done = autotune(
        "verify", "--preset", "tiny", "--synthetic", "--steps", "2", cwd=tmp_path, timeout=300
    )
    assert done.returncode == 0, done.stderr
    line = done.stdout.strip().splitlines()[-1]
    assert " over each run's first 3 training steps (warm-up included); " in line, line
