"""The gradient-arrival benchmark on the tiny replica, eager (compiled choices are for the GPU run:
their compilation would double this test's time)."""

from __future__ import annotations

import json

from autotune.benchmarks import grad_arrival


def test_eager_gradients_arrive_through_the_backward(tmp_path, capsys):
    out = tmp_path / "rows.json"
    assert (
        grad_arrival.main(
            ["--preset", "tiny", "--compile", "eager", "--repeats", "2", "--json", str(out)]
        )
        == 0
    )
    (row,) = json.loads(out.read_text())
    assert (
        row["trainable_params"] == row["runs"][0]["gradients"] > 50
    )  # every trainable gradient was seen
    # eager: a node per op, so the gradients spread over the backward (the first in its first half)
    assert row["first"] < 0.5 < row["last"] and row["bursts"] > 5, row
    assert "| eager | " in capsys.readouterr().out
