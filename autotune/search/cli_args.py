"""The command-line options of ``autotune run`` and ``autotune space`` (:mod:`autotune.search.cli`
registers the commands)."""

from __future__ import annotations

import argparse

from autotune.argtypes import NON_NEGATIVE, POSITIVE, SECONDS, SEED, duration, local_path
from autotune.search.converge import FREE_TRIALS
from autotune.search.sampling import SAMPLERS
from autotune.search.storage import GRACE_PERIOD
from autotune.search.urls import STORAGE_ENV
from autotune.train.memcap import GPU_HELP

DEFAULT_WORKLOAD = "gr00t_n16"


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``autotune run``, in the order ``--help`` lists them."""
    _add_study_arguments(p)
    _add_trial_arguments(p)
    _add_search_arguments(p)


def _add_study_arguments(p: argparse.ArgumentParser) -> None:
    """What is trained, in which space, how many trials, on what memory and GPUs."""
    p.add_argument(
        "--workload", default=DEFAULT_WORKLOAD, help="workload name or package.module:Class"
    )
    p.add_argument(
        "--preset",
        default=None,
        help="model preset (default: the workload's for this machine, e.g. full "
        "on GPU and tiny on CPU for gr00t_n16)",
    )
    p.add_argument(
        "--space",
        default=None,
        help="search space name or YAML path (default: the space made from the "
        "workload's regions and this machine, `autotune space` prints it; for gr00t_n16 and gr00t_n17 their "
        "own spaces on a GPU, quick on a CPU)",
    )
    p.add_argument(
        "--trials",
        type=POSITIVE,
        default=None,
        help="at most this many trials in the study, counting those of earlier runs; it ends earlier when it "
        "converges (default: 30 on GPU, 12 on CPU)",
    )
    p.add_argument(
        "--timeout-per-trial", type=SECONDS, default=600.0, help="seconds before a trial is killed"
    )
    p.add_argument(
        "--memory-budget",
        default=None,
        help="device memory each training process may use, e.g. 24GiB: on CUDA its allocator is "
        "capped there (the CUDA context counted) and a trial that needs more fails as out of "
        "memory with its peak; on a CPU its measured peak is checked against it (default: the "
        "GPU's memory, or on CPU the RAM this process may use, its cgroup's limit where lower, as "
        "a constraint only)",
    )
    p.add_argument("--gpu", default=None, metavar="NAME", help=GPU_HELP)
    p.add_argument("--nproc", type=POSITIVE, default=1, help="processes (GPUs) per trial")


def _add_trial_arguments(p: argparse.ArgumentParser) -> None:
    """Where the study lives, how each trial runs, and what it starts from."""
    p.add_argument(
        "--storage",
        default=None,
        help=f"Optuna storage URL (e.g. postgresql://...; or set ${STORAGE_ENV}, which "
        "keeps the password out of ps); default: a journal file in --out",
    )
    p.add_argument(
        "--grace-period",
        type=POSITIVE,
        default=GRACE_PERIOD,
        metavar="SECONDS",
        help="with --storage: a running trial whose worker sent no heartbeat for this long is failed and queued "
        "again by the other workers (default: %(default)s)",
    )
    p.add_argument("--out", default=None, help="run folder (default: runs/WORKLOAD-PRESET-SPACE)")
    p.add_argument(
        "--steps",
        type=POSITIVE,
        default=None,
        help="measured steps per trial (default: 10 on GPU, 3 on CPU)",
    )
    p.add_argument(
        "--warmup",
        type=NON_NEGATIVE,
        default=None,
        help="warm-up steps per trial, at least (default: 4 on GPU, 1 on CPU; more where the loader's buffer "
        "or a graph capture needs them)",
    )
    p.add_argument(
        "--batch-size",
        type=POSITIVE,
        default=None,
        help="samples per process per step (default: the preset's; 2 for tiny)",
    )
    p.add_argument("--sampler", default="tpe", choices=SAMPLERS, help="Optuna sampler")
    p.add_argument("--seed", type=SEED, default=0, help="seed of the sampler")
    p.add_argument(
        "--synthetic", action="store_true", help="synthetic batches instead of the dataset (no I/O)"
    )
    p.add_argument(
        "--dataset",
        type=local_path,
        default=None,
        metavar="DIR",
        help="train on this LeRobot dataset folder (data.dataset of the configuration; "
        "`autotune data check DIR` checks one)",
    )
    p.add_argument(
        "--base",
        default=None,
        metavar="CONFIG.yaml",
        help="start from this configuration instead of the stock one (trial 0, what speed-ups are "
        "measured against); its workload and preset are used unless --workload/--preset are given",
    )
    p.add_argument(
        "--reference",
        action="append",
        default=[],
        metavar="KEY=VALUE[,KEY=VALUE...]",
        help="also measure the stock configuration with these changes (e.g. compile.regions=[all]) as a "
        "trial of its own, for comparison; repeatable",
    )


def _add_search_arguments(p: argparse.ArgumentParser) -> None:
    """How the search goes: its guidance, pruning, profiling, time budget, end and confirmation."""
    p.add_argument(
        "--no-guidance",
        action="store_true",
        help="search all knobs from the start (no profile-guided stages)",
    )
    p.add_argument(
        "--stage-trials",
        type=POSITIVE,
        default=None,
        help="at most this many trials per profile-guided search stage; a stage ends earlier at its first "
        "trial that gains nothing beyond noise (default: 2)",
    )
    p.add_argument(
        "--no-prune",
        action="store_true",
        help="run every trial to its end (no pruning from step times)",
    )
    p.add_argument(
        "--profile-steps",
        type=NON_NEGATIVE,
        default=3,
        help="steps profiled after each trial's measured steps (0: none)",
    )
    p.add_argument(
        "--time-budget",
        type=duration,
        default=None,
        metavar="DURATION",
        help="end the search within this much time, e.g. 900, 15m, 1.5h: no trial starts that would not fit (by "
        "the study's median trial), one running at the end is stopped and queued for the next run "
        "(default: none, --trials decides)",
    )
    p.add_argument(
        "--converge-after",
        type=NON_NEGATIVE,
        default=FREE_TRIALS,
        metavar="K",
        help="stop when no bucket is left to act on and the last K free (TPE) trials found nothing within "
        "noise of the best; with neither --trials nor --time-budget, also when one more trial would "
        "search longer without finding anything than finding the best took "
        f"(0: run to --trials or --time-budget; default: {FREE_TRIALS})",
    )
    p.add_argument(
        "--confirm-rounds",
        type=NON_NEGATIVE,
        default=2,
        metavar="N",
        help="at the end, measure stock and the best again in fresh processes, interleaved, N rounds (more "
        "while they vary); the printed and written speed-up is the confirmed one (0: none; default: 2)",
    )


def add_space_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``autotune space``."""
    p.add_argument(
        "--workload",
        default=DEFAULT_WORKLOAD,
        help="workload name, path/to/file.py:Class or package.module:Class",
    )
    p.add_argument(
        "--preset", default=None, help="model preset (default: the workload's for this machine)"
    )
    p.add_argument(
        "--nproc",
        type=POSITIVE,
        default=1,
        help="processes (GPUs) per trial: several add the DDP knobs",
    )
    p.add_argument("--synthetic", action="store_true", help="synthetic batches (no loader knobs)")
    p.add_argument(
        "--cpu", action="store_true", help="the space of a machine without a GPU, on any machine"
    )
