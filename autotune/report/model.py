"""The report of a run folder as plain data: ``build_report(RUN_DIR) -> Report``.

Compute first, render second: this module reads the study and the files beside it into one
JSON-able object; ``autotune.report.render`` turns it into the HTML page, and tests assert on it.
Every part but the study is optional, so the report of a study that is still running, or was
interrupted, shows what there is and says what is missing (``Report.notes``).
"""

from __future__ import annotations

import copy
import datetime as dt
import math
import warnings
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.errors import ConfigError
from autotune.redact import StorageURL, redact
from autotune.report import folder
from autotune.report.memory import MemoryPrediction
from autotune.report.parts import Parity, Profile, RunInfo, Stage, TrialRow, pareto_front, trial_row
from autotune.search.data_echo import DataEcho
from autotune.search.finetune import Finetune, finetune
from autotune.search.stage import STAGES, STUDY_ATTR
from autotune.search.trials import (
    DUPLICATE,
    PREDICTED_OOM,
    PROFILE_DIR,
    RECORD,
    REFERENCE,
    best_trial,
    busy_s,
    feasible,
    measurement_of,
    reason_of,
    record_of,
    stock_trial,
)
from autotune.train.trial.record import loads_attr


@dataclass
class Summary:
    """The numbers at the top of the page."""

    stock_trial: int | None
    best_trial: int | None
    stock_samples_per_s: float | None
    best_samples_per_s: float | None
    speedup: float | None
    """Best over stock samples/s."""
    stock_peak_memory_bytes: int | None
    best_peak_memory_bytes: int | None
    memory_budget_bytes: int | None
    stock_mfu: float | None
    best_mfu: float | None
    stock_useful_mfu: float | None
    """MFU counting only the FLOPs that reach the loss or a gradient (``Measurement.useful_mfu``)."""
    best_useful_mfu: float | None
    trials: int
    """Every trial in the study, running ones included."""
    finished: int
    """Trials that ended (complete, pruned or failed)."""
    complete: int
    """Trials measured to the end (within or over the memory budget)."""
    pruned: int
    failed: int
    """Trials that gave no measurement: failed, out of memory, or interrupted."""
    running: int
    tuning_time_s: float | None
    """Seconds in which a trial ran (``autotune.search.trials.busy_s``)."""
    parity: Parity | None
    references: dict[str, float | None] = field(default_factory=dict)
    """Samples/s of each ``--reference`` configuration over stock's (None: it gave no measurement)."""
    skipped: int = 0
    """Trials not run: a configuration measured already (``duplicate``), or one predicted not to
    fit the memory budget."""
    confirmation: dict[str, Any] | None = None
    """best.yaml's ``confirmation`` (stock and the winner measured again, interleaved): where it
    confirmed, ``speedup`` and the samples/s above are the confirmed ones."""
    study_speedup: float | None = None
    """What the study's own trials said (best over stock), beside the confirmed speed-up."""
    converged: str | None = None
    """Why the study stopped by itself (None: it ran to --trials or --time-budget, or is running)."""
    stock_spread: float | None = None
    best_spread: float | None = None
    """p10-p90 of the trial's measured steps relative to their median."""
    best_numerics: dict[str, Any] | None = None
    """The best's knobs at values that change what is computed (low-bit optimizer states, fp8
    layers): its speed-up is of a different computation, which loss parity with stock decides."""
    parity_reference: str | None = None
    """Whose losses the trials were compared with (stock's; where stock did not fit, stock's
    without the memory cap or the first exact configuration that fits: ``autotune.search.vet``)."""


@dataclass
class Report:
    """Everything the page shows, as plain data (``to_dict`` is its JSON)."""

    run_dir: str
    study_name: str
    status: str
    """``finished`` or ``running or interrupted`` (the tuner has not written run.json's ``finished_at``)."""
    generated_at: str
    run: RunInfo
    summary: Summary
    trials: list[TrialRow]
    param_names: list[str]
    importances: dict[str, float] | None
    """Importance of each parameter for samples/s (Optuna's default, PED-ANOVA); None when not computable."""
    stages: list[Stage]
    stock_profile: Profile | None
    best_profile: Profile | None
    profiles: list[Profile]
    """Every profiling folder of the run, for the trace links."""
    best_yaml: str | None
    """best.yaml as written by the tuner (None until the tuner has written it)."""
    best_params: dict[str, Any]
    environment: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    """What could not be shown, and why."""
    finetune: Finetune | None = None
    """The command that fine-tunes with best.yaml (None until it is written)."""
    data_line: str | None = None
    """Which data the study trained on, as ``run`` printed it at its start (None: run.json says not)."""
    memory_prediction: MemoryPrediction | None = None
    """Under a memory budget: the trials not run for their predicted peak, and how the predictions
    of those that ran matched their measured peaks (None: no budget, or a run without them)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def trial(self, number: int) -> TrialRow | None:
        """Trial ``number`` of the study, or None where the study does not hold it (its journal was
        cut short while the diagnosis, written beside it, names the trial)."""
        return next((t for t in self.trials if t.number == number), None)


def build_report(
    run_dir: str | Path, study_name: str | None = None, storage: str | StorageURL | None = None
) -> Report:
    """Read the run folder (``autotune run --out RUN_DIR``) into a :class:`Report`.

    ``study_name`` defaults to run.json's. ``storage`` (a database URL) is the caller's: a study kept
    in a database is read only from a URL given here, never from the one run.json names.
    """
    return load_report(run_dir, study_name, storage)[0]


def load_report(
    run_dir: str | Path, study_name: str | None = None, storage: str | StorageURL | None = None
) -> tuple[Report, optuna.Study]:
    """The report of the run folder and the study it was built from (Optuna's plots draw from the study)."""
    run_dir = folder.check_folder(run_dir)
    notes: list[str] = []
    run = RunInfo.from_dict(folder.read_json(run_dir / "run.json", notes) or {}, notes)
    best_yaml = folder.read_text(run_dir / "best.yaml", notes)
    provenance = _provenance(best_yaml, run_dir / "best.yaml", notes)
    study = folder.open_study(
        run_dir,
        storage,
        study_name or run.study_name,
        provenance.get("study"),
        named=_text(run.storage),
    )
    if run.storage:  # an older run.json may hold a secret in clear; the page never shows one
        run = replace(run, storage=redact(_text(run.storage)))
    study = readable_study(study, notes)
    return report_of(study, run_dir, run, best_yaml, provenance, notes), study


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def report_of(
    study: optuna.Study,
    run_dir: Path,
    run: RunInfo,
    best_yaml: str | None,
    provenance: dict[str, Any],
    notes: list[str],
) -> Report:
    """The report of ``study``, with what its run folder holds beside it (run.json, best.yaml read by the caller)."""
    trials = study.get_trials(deepcopy=False)
    stock, best = stock_trial(study), best_trial(study)
    budget = run.memory_budget_bytes or provenance.get("memory_budget_bytes")
    front = pareto_front(trials)
    rows = [
        trial_row(t, run_dir, stock=t is stock, best=t is best, pareto=t.number in front)
        for t in trials
    ]
    diagnosis = folder.read_json(run_dir / "diagnosis.json", notes) or {}
    stages = _stages(study, diagnosis, run_dir, notes)
    profiles = [Profile.read(d, run_dir, notes) for d in folder.profile_dirs(run_dir, notes)]
    stock_profile = _profile_of(stock, profiles, None)
    best_profile = _profile_of(best, profiles, diagnosis.get("final_profile"))
    summary = _confirmed(
        _summary(trials, stock, best, budget, _parity(run_dir, provenance, notes)),
        provenance,
        diagnosis,
        trials,
        notes,
    )
    won = next((r for r in rows if r.number == summary.best_trial), None)
    summary.best_numerics = won.numerics if won is not None else None
    summary.parity_reference = _parity_reference(summary.parity, diagnosis)
    for trial, prof in ((stock, stock_profile), (best, best_profile)):
        _at_measured_rate(trial, prof)
    if best_yaml is None:
        notes.append(
            "best.yaml is not written yet (the study is running or was interrupted); "
            "the best trial's parameters are shown instead"
        )
    elif best is not None and provenance.get("trial") not in (None, best.number):
        if provenance.get("study_best_trial") == best.number:  # measured again, another trial won
            why = (provenance.get("confirmation") or {}).get("note")
            notes.append(
                f"best.yaml is of trial #{provenance['trial']}, not the study's best #{best.number}: the "
                f"confirmation kept it{f' ({why})' if why else ''}"
            )
        else:
            notes.append(
                f"best.yaml is of trial #{provenance['trial']}, the study's best is now #{best.number}"
            )
    if not profiles:
        notes.append(
            "the run folder holds no profiles (profiles/trial-NNNN): no time buckets, kernels or traces"
        )
    importances = _importances(study, notes)
    return Report(
        run_dir=str(run_dir),
        study_name=study.study_name,
        status=_status(run, trials, best_yaml),
        generated_at=dt.datetime.now().isoformat(timespec="seconds"),
        run=run,
        summary=summary,
        trials=rows,
        param_names=sorted({p for t in trials for p in t.params}),
        importances=importances,
        stages=stages,
        stock_profile=stock_profile,
        best_profile=best_profile,
        profiles=profiles,
        best_yaml=best_yaml,
        best_params=dict(best.params) if best else {},
        environment=_environment(best or stock, run),
        notes=notes,
        finetune=finetune(run_dir / "best.yaml", provenance) if best_yaml is not None else None,
        data_line=_data_line(run.data),
        memory_prediction=MemoryPrediction.from_dict(diagnosis.get("memory_prediction")),
    )


def _data_line(data: Any) -> str | None:
    """run.json's ``data`` as the line ``run`` printed (None where it is missing or not that record)."""
    if not isinstance(data, dict):
        return None
    try:
        return DataEcho(**data).line()
    except (TypeError, ValueError):  # another version's record: the page goes without it
        return None


def _status(run: RunInfo, trials: list[FrozenTrial], best_yaml: str | None) -> str:
    if run.finished_at:
        return "finished"
    if run.started_at:  # run.json written, the end not yet
        return "running or interrupted"
    # an older run folder without run.json: best.yaml is written when the tuner ends
    running = any(t.state in (TrialState.RUNNING, TrialState.WAITING) for t in trials)
    return "finished" if best_yaml is not None and not running else "running or interrupted"


def _provenance(best_yaml: str | None, path: Path, notes: list[str]) -> dict[str, Any]:
    from autotune.config.io import parse_yaml

    if best_yaml is None:
        return {}
    try:  # strictly: an alias bomb or deep nesting is a note, not a traceback or memory taken
        data = parse_yaml(best_yaml, path.name)
    except ConfigError as exc:
        notes.append(f"best.yaml's provenance could not be read ({exc}); left out")
        return {}
    prov = data.get("provenance") if isinstance(data, dict) else None
    return prov if isinstance(prov, dict) else {}


def _summary(
    trials: list[FrozenTrial],
    stock: FrozenTrial | None,
    best: FrozenTrial | None,
    budget: int | None,
    parity: Parity | None,
) -> Summary:
    stock_m = measurement_of(stock) if stock is not None else None
    best_m = measurement_of(best) if best is not None else None
    stock_speed = stock.value if stock is not None and feasible(stock) else None
    best_speed = best.value if best is not None else None
    states = [t.state for t in trials]
    oom = sum(t.state == TrialState.COMPLETE and reason_of(t) is not None for t in trials)
    skipped = sum(
        reason_of(t) in (DUPLICATE, PREDICTED_OOM) for t in trials if t.state.is_finished()
    )
    return Summary(
        stock_trial=stock.number if stock else None,
        best_trial=best.number if best else None,
        stock_samples_per_s=stock_speed,
        best_samples_per_s=best_speed,
        speedup=best_speed / stock_speed if best_speed and stock_speed else None,
        stock_peak_memory_bytes=stock_m.memory.allocated_bytes if stock_m else None,
        best_peak_memory_bytes=best_m.memory.allocated_bytes if best_m else None,
        memory_budget_bytes=budget,
        stock_mfu=stock_m.mfu if stock_m else None,
        best_mfu=best_m.mfu if best_m else None,
        stock_useful_mfu=stock_m.useful_mfu if stock_m else None,
        best_useful_mfu=best_m.useful_mfu if best_m else None,
        trials=len(trials),
        finished=sum(s.is_finished() for s in states),
        complete=states.count(TrialState.COMPLETE) - oom,
        pruned=states.count(TrialState.PRUNED),
        failed=states.count(TrialState.FAIL) + oom - skipped,
        skipped=skipped,
        running=states.count(TrialState.RUNNING) + states.count(TrialState.WAITING),
        tuning_time_s=busy_s(trials) if any(t.datetime_complete for t in trials) else None,
        parity=parity,
        stock_spread=stock_m.step_time.spread if stock_m else None,
        best_spread=best_m.step_time.spread if best_m else None,
        references={  # a name as text: one of another type (a study edited) is no dict key
            str(t.user_attrs[REFERENCE]): t.value / stock_speed
            if feasible(t) and stock_speed
            else None
            for t in trials
            if t.user_attrs.get(REFERENCE)
        },
    )


def _confirmed(
    summary: Summary,
    provenance: dict[str, Any],
    diagnosis: dict[str, Any],
    trials: list[FrozenTrial],
    notes: list[str],
) -> Summary:
    """The summary with best.yaml's confirmed numbers, where the winner was measured again: a winner
    other than the study's best (the runner-up, or stock) brings its own MFU and memory. A
    confirmation of another shape (a number turned to text, a winner the study has not) is left out."""
    from autotune.search.confirm import check_confirmation

    converged = diagnosis.get("converged") or {}
    summary.converged = provenance.get("converged") or (
        converged.get("reason") if isinstance(converged, dict) else None
    )
    conf = provenance.get("confirmation")
    summary.study_speedup = summary.speedup
    if conf is not None:
        try:
            check_confirmation(conf, {t.number for t in trials})
        except ValueError as exc:
            notes.append(
                f"best.yaml: its confirmation is not of the shape autotune writes ({exc}); left out: "
                "the study's own numbers are shown"
            )
            conf = None
    if isinstance(conf, dict):
        summary.confirmation = conf
        if provenance.get("confirmed") and conf.get("speedup") is not None:
            summary.speedup = conf["speedup"]
            summary.stock_samples_per_s = conf.get("stock_samples_per_s")
            summary.best_samples_per_s = conf.get("samples_per_s")
            summary.best_trial = conf.get("trial", summary.best_trial)
            won = (
                trials[summary.best_trial]
                if isinstance(summary.best_trial, int) and summary.best_trial < len(trials)
                else None
            )
            m = measurement_of(won) if won is not None else None
            if m is not None:
                summary.best_mfu, summary.best_useful_mfu = m.mfu, m.useful_mfu
                summary.best_peak_memory_bytes = m.memory.allocated_bytes
    return summary


def _at_measured_rate(trial: FrozenTrial | None, profile: Profile | None) -> None:
    """Give a loader-bound trial's profile the step it really ran at (its loader's rate)."""
    m = measurement_of(trial) if trial is not None else None
    if (
        profile is None
        or m is None
        or not m.loader.bound
        or not m.samples_per_s
        or not m.batch_size
    ):
        return
    profile.measured_step_ms = 1e3 * m.batch_size * m.world_size / m.samples_per_s


def _parity_reference(parity: Parity | None, diagnosis: dict[str, Any]) -> str | None:
    """parity.json's reference, else diagnosis.json's (the study's, while it has no winner)."""
    if parity is not None and parity.reference:
        return parity.reference
    ref = diagnosis.get("parity_reference")
    return ref.get("text") if isinstance(ref, dict) else None


def _parity(run_dir: Path, provenance: dict[str, Any], notes: list[str]) -> Parity | None:
    data = folder.read_json(run_dir / "parity.json", notes) or provenance.get("parity")
    return Parity.from_dict(data, "parity.json", notes) if isinstance(data, dict) else None


def _stages(
    study: optuna.Study, diagnosis: dict[str, Any], run_dir: Path, notes: list[str]
) -> list[Stage]:
    """The diagnosis chain: diagnosis.json, else the stages the running study keeps in its attributes."""
    raw, source = diagnosis.get("stages"), "diagnosis.json"
    if raw is None:
        source = f"the study's {STUDY_ATTR}"
        kept = study.user_attrs.get(
            STUDY_ATTR
        )  # the guide's record, kept up to date while the study runs
        where = f"study {study.study_name!r}: user_attrs.{STUDY_ATTR}"
        try:
            raw = loads_attr(kept, where, STAGES) if isinstance(kept, str) else kept
        except ConfigError as exc:  # a spoilt record of the stages costs the chain, not the page
            notes.append(f"{exc}; the diagnosis stages are left out")
            return []
    if not raw:
        notes.append(
            "no diagnosis stages (diagnosis.json, or the study's record of them): the search was not "
            "guided by profiles, or has not got past the stock trial yet"
        )
        return []
    if not isinstance(raw, list):
        notes.append(f"{source}: stages is {str(raw)[:60]}, not a list of stages; left out")
        return []
    return [Stage.from_dict(s, run_dir, notes) for s in raw if isinstance(s, dict)]


def _profile_of(
    trial: FrozenTrial | None, profiles: list[Profile], path: str | None
) -> Profile | None:
    """The profile of ``trial``: the folder ``path`` names, its ``profile_dir``, or profiles/trial-NNNN."""
    wanted = [path, trial.user_attrs.get(PROFILE_DIR) if trial is not None else None]
    # a folder's path is text: another type (a study or diagnosis.json edited) names no folder
    for want in (w for w in wanted if isinstance(w, str) and w):
        found = next(
            (
                p
                for p in profiles
                if Path(p.path) == Path(want) or Path(want).as_posix().endswith("/" + p.path)
            ),
            None,
        )
        if found:
            return found
    return (
        next((p for p in profiles if p.trial == trial.number), None) if trial is not None else None
    )


def readable_study(study: optuna.Study, notes: list[str]) -> optuna.Study:
    """``study``, or where a trial's record cannot be read (an edit by hand, another version's
    shape), an in-memory copy in which that trial has no record (noted): one spoilt trial costs
    its own measurement, not the whole report."""
    trials = study.get_trials(deepcopy=False)
    spoilt = {}
    for t in trials:
        try:
            record_of(t)
        except ConfigError as exc:
            spoilt[t.number] = exc
    if not spoilt:
        return study
    for number, exc in spoilt.items():
        notes.append(f"{exc}; trial #{number}'s measurement is left out")
    kept = _memory_study(study.directions, study.study_name)
    for key, value in study.user_attrs.items():
        kept.set_user_attr(key, value)
    kept.add_trials(_without_record(t) if t.number in spoilt else t for t in trials)
    return kept


def _without_record(trial: FrozenTrial) -> FrozenTrial:
    trial = copy.deepcopy(trial)
    trial.user_attrs = {k: v for k, v in trial.user_attrs.items() if k != RECORD}
    return trial


def _memory_study(
    directions: list[optuna.study.StudyDirection], name: str | None = None
) -> optuna.Study:
    verbosity = optuna.logging.get_verbosity()
    # Optuna's "a new study created in memory" is not news to the reader
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        return optuna.create_study(study_name=name, directions=directions)
    finally:
        optuna.logging.set_verbosity(verbosity)


def measured_study(study: optuna.Study, notes: list[str] | None = None) -> optuna.Study:
    """An in-memory copy of ``study`` with the completed trials that measured a speed only: a trial
    out of memory or not run (predicted not to fit) completes with 0 samples/s and a constraint that
    marks it infeasible, a value no knob's effect on speed should be learnt from.

    A trial holding a value its distribution does not (a value queued off a step's grid, which
    Optuna keeps) cannot be copied: it is left out, with a note in ``notes``."""
    measured = _memory_study(study.directions)
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if measurement_of(t) is None or not math.isfinite(t.value):  # Optuna refuses a NaN
            continue
        try:
            measured.add_trial(t)
        except ValueError as exc:
            if notes is not None:
                problem = str(exc)
                problem = problem[:1].lower() + problem[1:]
                notes.append(
                    f"trial #{t.number} is left out of the parameter importances: {problem}"
                )
    return measured


def _importances(study: optuna.Study, notes: list[str]) -> dict[str, float] | None:
    study = measured_study(study, notes)
    done = study.get_trials(deepcopy=False)
    if len(done) < 2 or not any(t.params for t in done):
        notes.append("parameter importances need at least 2 measured trials with parameters")
        return None
    varied = varied_params(done)
    if not varied:
        notes.append("parameter importances: no parameter took two values in the completed trials")
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # PED-ANOVA (deterministic, numpy only), over the knobs that varied: a knob held at one
            # value in every trial (a stage's fixed knobs) has no importance to report
            found = optuna.importance.get_param_importances(study, params=varied)
    except (ValueError, RuntimeError) as exc:
        notes.append(f"parameter importances could not be computed: {exc}")
        return None
    if not found:
        notes.append("parameter importances: no parameter was sampled in every completed trial")
        return None
    return {k: float(v) for k, v in found.items()}


def varied_params(trials: list[FrozenTrial]) -> list[str]:
    """Parameters present in every trial that took at least two values."""
    common = set.intersection(*(set(t.params) for t in trials)) if trials else set()
    return sorted(k for k in common if len({repr(t.params[k]) for t in trials}) > 1)


def _environment(trial: FrozenTrial | None, run: RunInfo) -> dict[str, Any]:
    env: dict[str, Any] = {}
    m = measurement_of(trial) if trial is not None else None
    if m is not None:
        env.update(m.environment)
        env.setdefault("world_size", m.world_size)
    env["optuna"] = optuna.__version__
    if run.nproc is not None:
        env.setdefault("processes per trial", run.nproc)
    return {k: v for k, v in env.items() if v is not None}
