"""An optimizer state moved between the offloaded layout (``optimizer.offload``) and torch's flat
one and back is the state it was: every moment at its parameter, each group's hyper-parameters.
The offloaded optimizer needs CUDA (a job resumed across the two layouts on the GPU:
``tests/train/test_gpu_resume.py``); here its layout is made from a CPU AdamW's real state by the
rule torchao splits parameters by (:data:`MINIMAL_SIZE`)."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from autotune.train.job import offload_state
from autotune.train.optim.offload import MINIMAL_SIZE


def _stepped_adamw() -> torch.optim.AdamW:
    big = [torch.nn.Parameter(torch.randn(MINIMAL_SIZE + i)) for i in range(3)]
    small = [torch.nn.Parameter(torch.randn(8 + i)) for i in range(2)]
    groups = [
        {"params": [big[0], small[0], big[1]], "weight_decay": 0.1},
        {
            "params": [big[2]],
            "weight_decay": 0.0,
            "lr": 2e-3,
        },  # no small parameter: none on the device
        {"params": [small[1]], "weight_decay": 0.0, "lr": 3e-3},
    ]
    opt = torch.optim.AdamW(groups, lr=1e-3)
    for _ in range(2):
        for g in groups:
            for p in g["params"]:
                p.grad = torch.randn_like(p)
        opt.step()
    return opt


def _offloaded_like(opt: torch.optim.AdamW) -> SimpleNamespace:
    """What :func:`offload_state.match` reads of an offloaded optimizer over ``opt``'s groups."""
    given = [list(g["params"]) for g in opt.param_groups]
    big = {p: None for ps in given for p in ps if p.numel() >= MINIMAL_SIZE}
    return SimpleNamespace(groups_given=given, param_d2h_map=big, d_opt=object())


def test_a_schedules_lists_laid_out_for_the_offloaded_groups_and_back_are_as_they_were():
    opt = _stepped_adamw()
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.5**step)
    schedule.step()
    flat = schedule.state_dict()
    split = offload_state.match_schedule(_offloaded_like(opt), flat)
    # the device's groups (of given groups 0 and 2), then one per large parameter (in 0, 0, 1)
    assert split["base_lrs"] == [1e-3, 3e-3, 1e-3, 1e-3, 2e-3]
    assert len(split["_last_lr"]) == len(split["lr_lambdas"]) == 5
    assert offload_state.match_schedule(opt, split) == flat
    assert offload_state.match_schedule(opt, flat) == flat


def test_a_flat_state_split_and_merged_again_is_the_state_it_was():
    opt = _stepped_adamw()
    flat = opt.state_dict()
    split = offload_state.match(_offloaded_like(opt), flat)
    assert [len(s["state"]) for s in split["offloaded"]] == [1, 1, 1]
    assert split["offloaded"][2]["param_groups"][0]["weight_decay"] == 0.0
    device = split["on-device"]
    assert [g["params"] for g in device["param_groups"]] == [[0], [1]]
    assert device["state"][1]["exp_avg"] is flat["state"][4]["exp_avg"]
    merged = offload_state.match(opt, split)
    assert merged["param_groups"] == flat["param_groups"]
    assert merged["state"].keys() == flat["state"].keys()
    for i, moments in flat["state"].items():
        assert all(merged["state"][i][k] is v for k, v in moments.items())


def test_a_state_of_neither_layout_is_handed_on_as_it_is():
    opt = _stepped_adamw()
    flat = opt.state_dict()
    assert offload_state.match(opt, flat) is flat  # already this optimizer's layout
    broken = {"offloaded": [{"state": {}}]}  # no param_groups: usable.check names it
    assert offload_state.match(opt, broken) is broken
    fewer = {**flat, "param_groups": flat["param_groups"][:1]}
    assert offload_state.match(_offloaded_like(opt), fewer) is fewer
