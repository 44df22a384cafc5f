"""``autotune run``: search the knobs for the fastest configuration.

    python -m autotune run                                   # CPU: tiny preset, quick space, a few trials
    python -m autotune run --preset full --space gr00t_n16 --trials 60 --nproc 8
    python -m autotune run --space search_spaces/quick.yaml --trials 3 --synthetic --steps 2 --warmup 1

Running the same command again continues the study kept in ``--out`` (``study.journal``); one
tuner works in a folder at a time (:mod:`autotune.ownership`). A study ends by itself when it
has converged (``--converge-after``), and ends with its winner measured again against stock
(``--confirm-rounds``): the speed-up it prints and writes is that one.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.config.compat import (
    Machine,
    check_compatible,
    check_data,
    check_nproc,
    compile_turned_off,
    use_dataset,
)
from autotune.search.budget import budget_of, default_budget
from autotune.search.cli_args import DEFAULT_WORKLOAD, add_run_arguments, add_space_arguments
from autotune.search.converge import FREE_TRIALS
from autotune.search.options import StudyOptions
from autotune.search.references import check_references, reference_config
from autotune.search.space import load_space
from autotune.search.storage import GRACE_PERIOD
from autotune.search.urls import storage_url

if TYPE_CHECKING:
    from autotune.workloads import Workload


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run", help="search the training knobs for the fastest configuration (an Optuna study)"
    )
    add_run_arguments(p)
    p.set_defaults(func=run_search)

    sp = sub.add_parser(
        "space",
        help="print the search space `run` searches for a workload (as YAML, to edit and pass "
        "back with --space FILE)",
    )
    add_space_arguments(sp)
    sp.set_defaults(func=_print_space)


def _print_space(args: argparse.Namespace) -> int:
    from autotune.search.space_choice import print_space

    return print_space(args)


def options(args: argparse.Namespace, machine: Machine) -> StudyOptions:
    """The study's options from the command line, with the machine's defaults filled in."""
    # torch (seconds to import) only now: a wrong flag or file is refused before it
    from autotune.search.space_choice import default_space
    from autotune.workloads.stock import stock_config

    gpu = machine.cuda
    asked = budget_of(args.memory_budget, args.gpu)
    budget, origin = (asked, "") if asked is not None else default_budget(gpu)
    if args.base:
        from autotune.config import load_config
        from autotune.config.io import load_config_as

        if args.workload != DEFAULT_WORKLOAD:
            base = load_config_as(args.base, args.workload)
        else:
            base = load_config(args.base)
        base.provenance = {}
        base.preset = args.preset or base.preset
    else:
        base = stock_config(args.workload, args.preset, cuda=gpu)
    if args.batch_size is not None:
        base.batch_size = args.batch_size
    use_dataset(base, args.dataset, args.synthetic)
    space = default_space(args.space, base, machine)
    # one folder whatever the workload's spelling: path/to/my.py:Class -> path.to.my.py.Class
    folder = re.sub(r"[^\w.-]+", ".", base.workload).strip(".")
    name = f"{folder}-{base.preset}-{space.name}"
    if args.base:
        name += f"-{Path(args.base).stem}"
    references = tuple((text, reference_config(base, text)) for text in args.reference)
    return StudyOptions(
        base=base,
        space=space,
        out=Path(args.out or Path("runs") / name),
        trials=_or(args.trials, 30 if gpu else 12),
        steps=_or(args.steps, 10 if gpu else 3),
        warmup=_or(args.warmup, 4 if gpu else 1),
        nproc=_or(args.nproc, 1),
        timeout_per_trial=args.timeout_per_trial,
        memory_budget=budget,
        memory_cap=asked is not None,
        memory_budget_origin=origin,
        sampler=args.sampler,
        seed=args.seed,
        storage=storage_url(args.storage),
        study_name=name,
        guidance=not args.no_guidance,
        references=references,
        stage_trials=_or(args.stage_trials, 2),
        prune=not args.no_prune,
        profile_steps=_or(args.profile_steps, 3),
        time_budget_s=args.time_budget,
        grace_period_s=_or(args.grace_period, GRACE_PERIOD),
        confirm_rounds=_or(args.confirm_rounds, 2),
        converge_after=_or(args.converge_after, FREE_TRIALS),
        plateau=args.trials is None and args.time_budget is None,
        machine=machine.name,
    )


def _or(value: int | None, default: int) -> int:
    """``value`` (range-checked by its argparse type), ``default`` when not given."""
    return default if value is None else value


def _check_base(
    args: argparse.Namespace,
    opts: StudyOptions,
    machine: Machine,
    regions: tuple[str, ...],
    workload: Workload,
) -> None:
    """The base configuration's values against the workload and this machine, as its stock trial's
    are checked, before anything is written: an error names ``--base``'s file as reading it would."""
    from autotune.config.named import checking_values, naming_file
    from autotune.search.params import trial_config

    source = args.base
    if args.base and args.workload != DEFAULT_WORKLOAD:  # read as options() reads it
        source = f"{args.base} (as --workload {args.workload})"
    with naming_file(source), checking_values():
        check_data(opts.base, workload.data_sources(), workload.data_fields)
        check_compatible(trial_config(opts.base, {}), machine, regions)


def run_search(args: argparse.Namespace) -> int:
    if args.space:  # a wrong space file is refused before torch is imported (seconds)
        args.space = load_space(args.space)
    from autotune.config.io import remove_stale_temporaries
    from autotune.ownership import own_folder
    from autotune.search.confirm import reserve_s
    from autotune.search.data_echo import data_echo
    from autotune.search.finish import finish_study, stop_study
    from autotune.search.output import write_run_info
    from autotune.search.reuse import WRITTEN, check_same_study
    from autotune.search.study import open_study, run_study
    from autotune.workloads import get_workload

    machine = Machine.current(world_size=_or(args.nproc, 1))
    check_nproc(machine.world_size, machine.cuda)
    opts = options(args, machine)
    worker_hint = " (to add a worker to the same study, use --storage and a folder of its own)"
    # first: a second tuner on the folder is refused at once
    with own_folder(opts.out, "autotune run", "--out", worker_hint):
        workload = get_workload(opts.base.workload)
        regions = tuple(workload.region_trains(opts.base.preset))
        _check_base(args, opts, machine, regions, workload)
        loads_data = opts.base.data.source != "synthetic"
        opts.space, notes = opts.space.for_machine(machine, loads_data)
        for note in notes:
            print(f"note: {note}")
        if off := compile_turned_off():
            print(
                f"note: {off}=1 in this environment: torch.compile runs nothing compiled, so the "
                "compile knobs measure as eager in every trial; unset it to tune them"
            )
        # stock outside the space: refused before the study is written
        opts.space.stock_params(opts.base)
        check_references(opts)
        check_same_study(opts)  # before run.json is written: another study's folder stays as it is
        remove_stale_temporaries(opts.out, WRITTEN)  # of a run killed while it wrote one
        origin = f" ({opts.memory_budget_origin})" if opts.memory_budget_origin else ""
        print(
            f"study {opts.study_name!r}: {len(opts.space.knobs)} knobs, {opts.trials} trials of {opts.warmup}+{opts.steps} "
            f"steps, memory budget {opts.memory_budget / 2**30:.1f} GiB{origin}, folder {opts.out}",
            flush=True,
        )
        echo = data_echo(opts.base, workload)
        opts.data = echo.to_dict()
        print(echo.line(), flush=True)
        if not machine.cuda and opts.base.preset != workload.preset_for(False):
            print(
                f"note: preset {opts.base.preset} on a CPU takes minutes a trial and may not finish within "
                f"--timeout-per-trial; --preset {workload.preset_for(False)} is the CPU's",
                flush=True,
            )
        study = open_study(opts)  # first: a study measured under other settings is refused here
        write_run_info(opts, finished=False)
        say = lambda line: print(line, flush=True)  # noqa: E731
        result = run_study(
            opts,
            machine,
            regions,
            report=say,
            reserve=lambda s: reserve_s(s, opts.confirm_rounds),
            study=study,
        )
        if result.stopped is not None:
            stop_study(opts, result.study, result.stopped)
        finish_study(opts, result.study, result.converged, result.deadline)
    return 0
