"""A sync-bound incumbent is not sent to CUDA graphs: the time the host spends blocked in a
synchronising call is sync_wait, which no knob group addresses."""

from __future__ import annotations

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import create_trial

from autotune.profiling import BUCKETS
from autotune.search.bottleneck import BUCKET_GROUPS
from autotune.search.guide import Guide
from autotune.search.space import parse_space
from autotune.search.trials import RECORD
from tests.records import measured

SPACE = {"knobs": {
    "graphs.mode": {"type": "categorical", "choices": ["none", "step"], "group": "graphs", "remedy": "step"},
    "optimizer.impl": {"type": "categorical", "choices": ["foreach", "fused"], "group": "optimizer", "remedy": "fused"},
}}  # fmt: skip
DISTS = {"graphs.mode": CategoricalDistribution(["none", "step"]),
         "optimizer.impl": CategoricalDistribution(["foreach", "fused"])}  # fmt: skip


def _first_stage(tmp_path, buckets):
    study = optuna.create_study(direction="maximize")
    study.add_trial(create_trial(params={"graphs.mode": "none", "optimizer.impl": "foreach"}, distributions=DISTS,
                                 value=10.0, user_attrs={RECORD: measured(10.0, buckets=buckets).to_json()}))  # fmt: skip
    guide = Guide(
        parse_space(SPACE, tmp_path / "s.yaml"), stage_trials=2, together=False
    )  # one remedy a stage
    return guide.next_trial(study, study.trials[-1])[1]


def test_every_bucket_has_its_groups():
    assert set(BUCKET_GROUPS) == set(BUCKETS)
    assert "graphs" not in BUCKET_GROUPS["sync_wait"]


def test_a_sync_bound_incumbent_goes_past_graphs(tmp_path):
    """HTA's 16-rank trace, classified: sync 47 %, compute 22 %, comm 16 %, launch 12 %."""
    sync_bound = {"compute_serial": 0.22, "comm_wait": 0.16, "launch_overhead": 0.03, "sync_wait": 0.56,
                  "data_stall": 0.0, "other": 0.03}  # fmt: skip
    stage = _first_stage(tmp_path, sync_bound)
    assert stage.dominant == "sync_wait"
    assert (stage.bottleneck, stage.groups) == ("compute_serial", ["optimizer"])
    # the same step read the old way (the blocked host as launch overhead) went to graphs first
    as_launch = dict(sync_bound, launch_overhead=0.59, sync_wait=0.0)
    assert _first_stage(tmp_path, as_launch).groups == ["graphs"]
