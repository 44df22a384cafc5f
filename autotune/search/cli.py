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

from autotune.argtypes import NON_NEGATIVE, POSITIVE, SECONDS, SEED
from autotune.config.compat import Machine, check_data, use_dataset
from autotune.errors import ConfigError
from autotune.search.budget import budget_of, default_budget
from autotune.search.converge import FREE_TRIALS
from autotune.search.options import StudyOptions
from autotune.search.sampling import SAMPLERS
from autotune.search.space import load_space
from autotune.search.storage import GRACE_PERIOD
from autotune.search.urls import STORAGE_ENV, storage_url
from autotune.train.memcap import GPU_HELP
from autotune.workloads.stock import stock_config

DEFAULT_WORKLOAD = "gr00t_n16"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run", help="search the training knobs for the fastest configuration (an Optuna study)"
    )
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
        "GPU's memory, or RAM on CPU, as a constraint only)",
    )
    p.add_argument("--gpu", default=None, metavar="NAME", help=GPU_HELP)
    p.add_argument("--nproc", type=POSITIVE, default=1, help="processes (GPUs) per trial")
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
    p.set_defaults(func=run_search)

    sp = sub.add_parser(
        "space",
        help="print the search space `run` searches for a workload (as YAML, to edit and pass "
        "back with --space FILE)",
    )
    sp.add_argument(
        "--workload",
        default=DEFAULT_WORKLOAD,
        help="workload name, path/to/file.py:Class or package.module:Class",
    )
    sp.add_argument(
        "--preset", default=None, help="model preset (default: the workload's for this machine)"
    )
    sp.add_argument(
        "--nproc",
        type=POSITIVE,
        default=1,
        help="processes (GPUs) per trial: several add the DDP knobs",
    )
    sp.add_argument("--synthetic", action="store_true", help="synthetic batches (no loader knobs)")
    sp.add_argument(
        "--cpu", action="store_true", help="the space of a machine without a GPU, on any machine"
    )
    sp.set_defaults(func=print_space)


def options(args: argparse.Namespace, machine: Machine) -> StudyOptions:
    """The study's options from the command line, with the machine's defaults filled in."""
    gpu = machine.cuda
    asked = budget_of(args.memory_budget, args.gpu)
    budget = asked if asked is not None else default_budget(gpu)
    if args.base:
        from autotune.config import load_config

        base = load_config(args.base)
        base.provenance = {}
        base.workload = args.workload if args.workload != DEFAULT_WORKLOAD else base.workload
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
        sampler=args.sampler,
        seed=args.seed,
        storage=storage_url(args.storage),
        study_name=name,
        guidance=not args.no_guidance,
        references=references,
        stage_trials=_or(args.stage_trials, 2),
        prune=not args.no_prune,
        profile_steps=_or(args.profile_steps, 3),
        time_budget_s=parse_duration(args.time_budget) if args.time_budget else None,
        grace_period_s=_or(args.grace_period, GRACE_PERIOD),
        confirm_rounds=_or(args.confirm_rounds, 2),
        converge_after=_or(args.converge_after, FREE_TRIALS),
        plateau=args.trials is None and args.time_budget is None,
    )


def _or(value: int | None, default: int) -> int:
    """``value`` (range-checked by its argparse type), ``default`` when not given."""
    return default if value is None else value


OWN_SPACES = ("gr00t_n16", "gr00t_n17")
"""Workloads with a shipped space of their own (``search_spaces/<workload>.yaml``), their default on a
GPU; on a CPU theirs is ``quick``."""


def shipped_space(workload: str, machine: Machine) -> str | None:
    """The shipped space ``run`` searches by default for ``workload`` here; None: the auto space."""
    if workload not in OWN_SPACES:
        return None
    return workload if machine.cuda else "quick"


def default_space(name: str | None, base, machine: Machine):
    """The space asked for (validated against the workload's regions), or by default: a GR00T
    workload's own spaces for it (``gr00t_n16`` or ``gr00t_n17`` on GPU, ``quick`` on CPU), for any
    other workload the space made from its region map and the machine
    (:func:`autotune.search.auto_space.auto_space`)."""
    from autotune.search.auto_space import auto_space, check_space_regions, workload_facts

    facts = workload_facts(base)
    name = name or shipped_space(base.workload, machine)
    if name is None:
        return auto_space(facts, machine)
    space = load_space(name)
    check_space_regions(space, facts)
    return space


def print_space(args: argparse.Namespace) -> int:
    """``autotune space``: the space made from the workload's regions and this machine, as YAML."""
    import dataclasses

    import yaml

    from autotune.search.auto_space import auto_space_data, workload_facts

    machine = Machine.current(world_size=args.nproc)
    if args.cpu:
        machine = dataclasses.replace(machine, cuda=False, capability=None)
    shipped = shipped_space(args.workload, machine)
    if shipped is not None:  # what run searches: the file itself, its comments included
        from autotune.search.space import spaces_dir

        print(f"# autotune space --workload {args.workload}: search_spaces/{shipped}.yaml, the "
              "default of `autotune run` here; `autotune run --space FILE` searches an edited copy.")  # fmt: skip
        print((spaces_dir() / f"{shipped}.yaml").read_text(), end="")
        return 0
    base = stock_config(args.workload, args.preset, cuda=machine.cuda)
    if args.synthetic:
        base.data.source = "synthetic"
    data = auto_space_data(workload_facts(base), machine)
    print(
        f"# autotune space --workload {args.workload} (preset {base.preset}); `autotune run --space FILE` searches a "
        "file of it.\n# Knobs marked `requires: cuda` are dropped on a machine without a GPU."
    )

    class Plain(yaml.SafeDumper):  # each knob spelled out, no &anchors
        def ignore_aliases(self, data):
            return True

    print(
        yaml.dump(data, Dumper=Plain, sort_keys=False, default_flow_style=None, width=120), end=""
    )
    return 0


def parse_duration(text: str) -> float:
    """Seconds of ``900``, ``900s``, ``15m`` or ``1.5h``."""
    units = {"s": 1.0, "m": 60.0, "h": 3600.0}
    value, unit = (text[:-1], text[-1]) if text and text[-1] in units else (text, "s")
    try:
        seconds = float(value) * units[unit]
    except ValueError:
        raise ConfigError(
            f"--time-budget: {text!r} is not a duration (e.g. 900, 900s, 15m, 1.5h)"
        ) from None
    if not seconds > 0:
        raise ConfigError(f"--time-budget: {text!r} must be more than zero")
    return seconds


def reference_config(base, text: str):
    """``base`` with ``key=value`` pairs applied (values in YAML: ``[all]``, ``true``, ``8``)."""
    import yaml

    from autotune.errors import ConfigError
    from autotune.search.knob_entry import check_key
    from autotune.search.knobs import apply_values

    values = {}
    for pair in text.split(","):
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(
                f"--reference: {pair!r} is not KEY=VALUE (e.g. compile.regions=[all])"
            )
        try:
            values[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or type(exc).__name__
            raise ConfigError(
                f"--reference: {pair!r}: the value is not YAML ({problem}); e.g. compile.regions=[all]"
            ) from None
    for key in values:
        try:
            check_key(key)
        except ConfigError as exc:
            raise ConfigError(f"--reference: {key!r}: {exc}") from None
    try:
        return apply_values(base, values)
    except ConfigError as exc:
        raise ConfigError(f"--reference {text!r}: {exc}") from None


def check_references(opts) -> None:
    """A reference may change only knobs of the space: a trial is rebuilt from its knob values."""
    from autotune.config import to_dict
    from autotune.errors import ConfigError
    from autotune.search.params import config_of_params, trial_config

    for text, cfg in opts.references:
        rebuilt = config_of_params(opts, opts.space.stock_params(cfg))
        if to_dict(rebuilt) != to_dict(trial_config(cfg, {})):
            raise ConfigError(
                f"--reference {text!r}: changes a setting that is not a knob of search space "
                f"{opts.space.name!r} (on this machine); allowed: {[k.key for k in opts.space.knobs]}"
            )


def write_study_report(opts):
    """``report.html`` of the finished study; a report that cannot be made is a warning, not a failure."""
    from autotune.errors import AutotuneError
    from autotune.report import write_report

    try:
        return write_report(opts.out, study_name=opts.study_name, storage=opts.storage)
    except AutotuneError as exc:
        print(f"warning: no report: {exc}")
    except Exception as exc:  # noqa: BLE001  the study and best.yaml stand; `autotune report` can retry
        print(
            f"warning: no report ({type(exc).__name__}: {exc}); rebuild it with: python -m autotune report {opts.out}"
        )
    return None


def speedup_line(best: Path) -> str:
    """``1.42x stock, confirmed`` or ``1.42x stock in the study, not confirmed`` from best.yaml."""
    from autotune.config import load_config

    prov = load_config(best).provenance
    speedup = prov.get("speedup_vs_stock")
    if speedup is None:
        return "no stock measurement to compare with"
    if prov.get("trial") == prov.get("stock_trial"):
        return "the stock configuration: nothing measured faster" + (
            ", confirmed" if prov.get("confirmed") else ""
        )
    return f"{speedup:.2f}x stock, " + ("confirmed" if prov.get("confirmed") else "not confirmed")


def run_search(args: argparse.Namespace) -> int:
    from autotune.ownership import own_folder
    from autotune.search.confirm import reserve_s
    from autotune.search.data_echo import data_echo
    from autotune.search.output import write_run_info
    from autotune.search.reuse import check_same_study
    from autotune.search.study import open_study, run_study
    from autotune.workloads import get_workload

    machine = Machine.current(world_size=_or(args.nproc, 1))
    opts = options(args, machine)
    worker_hint = " (to add a worker to the same study, use --storage and a folder of its own)"
    # first: a second tuner on the folder is refused at once
    with own_folder(opts.out, "autotune run", "--out", worker_hint):
        workload = get_workload(opts.base.workload)
        regions = tuple(workload.regions(workload.build_model(opts.base.preset, "meta")))
        check_data(opts.base, workload.data_sources(), workload.data_fields)
        opts.space, notes = opts.space.for_machine(machine)
        for note in notes:
            print(f"note: {note}")
        check_references(opts)
        check_same_study(opts)  # before run.json is written: another study's folder stays as it is
        print(
            f"study {opts.study_name!r}: {len(opts.space.knobs)} knobs, {opts.trials} trials of {opts.warmup}+{opts.steps} "
            f"steps, memory budget {opts.memory_budget / 2**30:.1f} GiB, folder {opts.out}",
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


def stop_study(opts, study, why: str) -> None:
    """End a study that cannot go on: trials.csv, run.json and the report written, then ``why`` as
    the one error line."""
    from autotune.errors import TrialError
    from autotune.search.output import write_run_info, write_trials

    write_trials(opts, study)
    write_run_info(opts, finished=True)
    report = write_study_report(opts)
    if report is not None:
        print(f"report: {report}")
    raise TrialError(why, "stock")


def finish_study(opts, study, converged=None, deadline: float | None = None) -> None:
    """trials.csv, the winner confirmed against stock (``--confirm-rounds``, no run starting that would
    end after ``deadline``), parity.json and best.yaml (left as they are when the study has not
    changed since best.yaml was written), then run.json and report.html, also when no trial gave a best."""
    from autotune.search.confirm import confirm, write_confirmation
    from autotune.search.output import (
        best_is_current,
        write_best,
        write_parity,
        write_run_info,
        write_trials,
    )

    write_trials(opts, study)
    try:
        if best_is_current(opts, study):
            best = opts.out / "best.yaml"
            print(
                f"nothing new in study {opts.study_name!r} since {best} was written: left as it is (options such as "
                "--memory-budget apply to the trials still to run: raise --trials to run more)"
            )
        else:
            confirmation = None
            if opts.confirm_rounds:
                confirmation = confirm(
                    opts,
                    study,
                    opts.confirm_rounds,
                    deadline=deadline,
                    report=lambda line: print(line, flush=True),
                )
                if confirmation is not None:
                    write_confirmation(opts.out, confirmation)
                    print(confirmation.line(), flush=True)
            best = write_best(
                opts, study, write_parity(opts, study, confirmation), confirmation, converged
            )
    finally:  # a study without a winner still gets its report, which says why
        write_run_info(opts, finished=True)
        report = write_study_report(opts)
        if report is not None:
            print(f"report: {report}")
    from autotune.config import load_config
    from autotune.search.finetune import finetune

    print(f"best configuration: {best} ({speedup_line(best)})")
    for line in finetune(best, load_config(best).provenance).lines():
        print(line, flush=True)
