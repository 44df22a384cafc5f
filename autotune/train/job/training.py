"""The long job: ``autotune train --config best.yaml --max-steps N --save-steps K --output-dir D``.

One rank's run (torchrun starts several; ``job_launch`` starts them). Steps ``1..N`` are training
steps from the first (the learning-rate schedule spans N); every K steps, at the end, at
``--stop-at`` and on SIGTERM or SIGHUP the job writes ``D/checkpoint-<step>`` (``checkpoint``; rank
0 writes in the background from a host copy, see ``state``). Started again with the same command it
resumes after the newest complete checkpoint: weights, optimizer, schedule, every rank's random
states and the data position (the draws its steps consumed: the sampler starts there, so no sample
is seen twice or skipped whatever the loader's workers had made ahead) are restored, so that on the
CPU it trains exactly what an uninterrupted run trains.

    python -m autotune train --preset tiny --max-steps 20 --save-steps 5 --output-dir /tmp/job --json
"""

from __future__ import annotations

import atexit
import copy
import functools
import itertools
import math
import multiprocessing
import signal
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from torch.utils.data import DataLoader

from autotune.childsignals import STOPS, children_may_end
from autotune.config import TrainConfig, to_dict
from autotune.config.io import dump_config
from autotune.errors import ConfigError, TrialError
from autotune.redact import hide_secrets
from autotune.train import distributed
from autotune.train.job import checkpoint, state, usable
from autotune.train.job.control import Control
from autotune.train.job.loop import Loop
from autotune.train.session import Session
from autotune.train.window.setup import warmup_steps


@dataclass(frozen=True)
class JobOptions:
    max_steps: int
    output_dir: Path
    save_steps: int | None = None
    save_total_limit: int | None = None
    log_steps: int = 10
    init_from: Path | None = None
    stop_at: int | None = None
    """Train up to this step of the N-step schedule, save, and exit (the same command without it continues)."""
    progress: bool = True
    profile_steps: int = 3

    def __post_init__(self) -> None:
        for name in ("max_steps", "save_steps", "save_total_limit", "log_steps", "stop_at"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ConfigError(f"--{name.replace('_', '-')}: {value!r} is not an integer >= 1")
        if self.stop_at is not None and self.stop_at > self.max_steps:
            raise ConfigError(f"--stop-at: {self.stop_at} is past --max-steps {self.max_steps}")


@dataclass
class JobResult:
    """What ``--json`` prints: ``start_step`` (the first step this invocation trained) and one
    loss per step it trained, with what the job measured."""

    start_step: int
    final_step: int
    max_steps: int
    losses: list[float]
    grad_norms: list[float]
    resumed_from: str | None
    preempted: bool
    """Stopped before its end by a signal (``stopped_by``)."""
    checkpoints: list[dict[str, Any]]
    samples_per_s: float | None
    """Median over the steps after warm-up (``world x batch / median step time``)."""
    samples_per_s_overall: float | None
    """The same steps' samples over their summed time: checkpoint stalls included."""
    step_time_ms: float | None
    steady_steps: int
    """Steps after warm-up that the two rates are of."""
    steady_s: float
    """Their summed time (seconds)."""
    world_size: int
    batch_size: int
    output_dir: str
    init_from: str | None
    warnings: list[str] = field(default_factory=list)
    stopped_by: str | None = None
    """``SIGTERM``, ``SIGHUP`` or ``SIGINT`` (Ctrl-C) where one stopped the job before its end."""
    profile: dict[str, Any] | None = None
    host_buffers_s: float | None = None
    """Seconds taken after the first step to allocate (and page-lock) the checkpoints' host buffers."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def position_loader(loader, next_draw: int, batch_size: int, world: int):
    """``loader`` starting at global draw ``next_draw``: its sharded sampler told where, or, for any
    other deterministic loader, the batches this rank consumed skipped."""
    from autotune.data.sampler import ShardedInfiniteSampler

    sampler = getattr(loader, "sampler", None)
    if isinstance(sampler, ShardedInfiniteSampler):
        sampler.start = next_draw
        return loader
    return itertools.islice(loader, next_draw // (batch_size * world), None)


def _ignore_stop_signals(init, worker_id: int) -> None:
    for signum in STOPS:
        signal.signal(signum, signal.SIG_IGN)
    if init is not None:
        init(worker_id)


def shield_workers(loader) -> None:
    """Loader workers ignore SIGTERM, SIGINT and SIGHUP: torch's workers exit on them, and a
    scheduler that signals the whole process group (or Ctrl-C, which a terminal sends to all of it,
    or the shell's SIGHUP to its jobs as the terminal closes) would otherwise kill them (failing
    the job's main process) before the job has saved. They still stop when the job ends (a
    sentinel) or dies (they watch their parent).

    At exit Python's multiprocessing stops its daemon children with SIGTERM and waits for them:
    workers whose iterator is still alive then (held by a traceback's frames, or one that failed
    while starting them) would be waited on forever, so the job kills them first."""
    if isinstance(loader, DataLoader) and loader.num_workers > 0:
        loader.worker_init_fn = functools.partial(_ignore_stop_signals, loader.worker_init_fn)
        atexit.unregister(_kill_workers_left)
        atexit.register(_kill_workers_left)  # after multiprocessing's: atexit runs it before


def _kill_workers_left() -> None:
    children_may_end()  # at exit a worker's end is no error
    for child in multiprocessing.active_children():
        if child.daemon:  # a loader worker: the job is over, it has nothing to finish
            child.kill()


def _data_named(data: dict[str, Any], first_source: str) -> str:
    """How a warning names the data of a configuration's ``data`` section (a null source is the
    workload's first, ``first_source``)."""
    source = data.get("source") or first_source
    if data.get("dataset"):
        return f"--dataset {data['dataset']}"
    if source == "synthetic":
        return "synthetic batches"
    return f"the workload's own data ({source})"


SCHEDULE_SHAPE = ("schedule", "warmup_ratio", "lr")
"""The optimizer's fields that shape the learning-rate schedule beside its length (--max-steps)."""


def _plain(value: Any) -> Any:
    """A configuration's value as its YAML holds it (betas: a list)."""
    return list(value) if isinstance(value, tuple) else value


def _trained_config(loaded: checkpoint.Loaded) -> dict[str, Any]:
    """The configuration a checkpoint was trained with, as its state records it ({} if not a mapping)."""
    trained = loaded.state.get("config")
    return trained if isinstance(trained, dict) else {}


class Job:
    def __init__(self, cfg: TrainConfig, opts: JobOptions) -> None:
        self.opts = opts
        self.cfg = copy.deepcopy(cfg)
        self.cfg.optimizer.total_steps = opts.max_steps
        self.rank, self.world, local = distributed.init_from_env()
        self.control = Control(self.world)
        self.out = opts.output_dir
        self.warnings: list[str] = []
        self._check_draws()
        checkpoint.check_config_fits(to_dict(self.cfg))
        self.session = Session(self.cfg, self.rank, self.world, local)
        self.device = self.session.device
        self.writer = checkpoint.Writer(self.out, opts.save_total_limit)
        self.buffers = state.HostBuffers(self.device)
        self.losses: list[float] = []
        self.norms: list[float] = []
        self.times: list[float] = []
        self.buffers_s: float | None = None
        """Seconds rank 0 took to allocate its checkpoints' host buffers (``reserve``)."""

    # -- setup --------------------------------------------------------------------------------------
    @property
    def draws(self) -> int:
        """Samples a step draws, every rank's together."""
        return self.cfg.batch_size * self.world

    def _check_draws(self) -> None:
        """The data position at the job's end fits what a checkpoint records (``COUNT_END``), or
        the job would write checkpoints it refuses to resume from."""
        total = self.opts.max_steps * self.draws
        if total >= checkpoint.COUNT_END:
            raise ConfigError(
                f"--max-steps {self.opts.max_steps}: its steps draw {total} samples ({self.draws} "
                f"a step), past 2**63, the most a data position holds; allowed: at most "
                f"{(checkpoint.COUNT_END - 1) // self.draws}"
            )

    def warn(self, line: str) -> None:
        line = hide_secrets(line)  # it names paths the user gave: printed and kept in the result
        self.warnings.append(line)
        if self.rank == 0:
            print(f"autotune: warning: {line}", file=sys.stderr, flush=True)

    def _resume_point(self) -> checkpoint.Loaded | None:
        """The checkpoint to resume from (None: the start), agreed by every rank: rank 0 chooses it
        or refuses the folder, the others load the one it chose; where one rank fails, every rank
        stops, and only those that failed say why (:meth:`Control.agree`)."""
        loaded = self.control.agree(self._choose if self.rank == 0 else None)
        chosen = self.control.broadcast(loaded.step if loaded else None)
        if chosen is None:
            return None
        theirs = self.control.agree(None if self.rank == 0 else lambda: self._load_chosen(chosen))
        return loaded if self.rank == 0 else theirs

    def _choose(self) -> checkpoint.Loaded | None:
        """Rank 0's choice: the newest usable checkpoint, partial ones removed first."""
        self.out.mkdir(parents=True, exist_ok=True)
        checkpoint.remove_partial(self.out)
        loaded = checkpoint.latest(self.out, self.warn, check=self._check_usable)
        if loaded is not None:
            self._check_end(loaded)
        return loaded

    def _load_chosen(self, step: int) -> checkpoint.Loaded:
        """The checkpoint of ``step``, which rank 0 chose, as another rank reads it."""
        loaded = checkpoint.latest(self.out, self.warn, at=step, check=self._check_usable)
        if loaded is None:
            raise ConfigError(
                f"{self.out}: rank {self.rank} cannot read checkpoint-{step}, which rank 0 resumes "
                f"from (is --output-dir on a file system every node shares?)"
            )
        return loaded

    def _check_usable(self, loaded: checkpoint.Loaded) -> None:
        """``ConfigError`` for a checkpoint of another workload or configuration; ``CorruptCheckpoint``
        (skipped for the one before) for files that do not fit this job (:mod:`usable`)."""
        st = loaded.state
        if (st.get("workload"), st.get("preset")) != (self.cfg.workload, self.cfg.preset):
            raise ConfigError(
                f"{loaded.path} is of {st.get('workload')}/{st.get('preset')}; this job trains "
                f"{self.cfg.workload}/{self.cfg.preset}: give another --output-dir"
            )
        self._check_room(loaded)
        usable.check(self.session, loaded)

    def _check_room(self, loaded: checkpoint.Loaded) -> None:
        """The steps still to come draw from the checkpoint's data position without passing
        ``COUNT_END`` (:meth:`_check_draws`: a job's own positions never come near it)."""
        left = max(0, self.opts.max_steps - loaded.step)
        draw = loaded.state["data"]["next_draw"]
        if draw + left * self.draws >= checkpoint.COUNT_END:
            raise checkpoint.CorruptCheckpoint(
                f"{loaded.path / checkpoint.STATE}: data.next_draw: {draw} leaves no room below "
                f"2**63 for steps {loaded.step + 1}..{self.opts.max_steps} ({self.draws} draws each)"
            )

    def _check_end(self, loaded: checkpoint.Loaded) -> None:
        """A job resumed past its end would train nothing and report steps N+1..M of M < N."""
        end, flag = (
            (self.opts.stop_at, "--stop-at")
            if self.opts.stop_at
            else (self.opts.max_steps, "--max-steps")
        )
        if loaded.step > end:
            raise ConfigError(
                f"{flag} {end}: {loaded.path} has already trained to step {loaded.step}; allowed: "
                f"{flag} >= {loaded.step} to resume it, or another --output-dir to start afresh"
            )

    def _init_weights(self, loaded: checkpoint.Loaded | None) -> dict[str, Any] | None:
        from autotune.weights import fingerprint, load_upstream

        opts, cfg = self.opts, self.cfg
        before = (loaded.state.get("init_from") if loaded else None) or None
        if opts.init_from is None:
            if before:
                raise ConfigError(
                    f"{loaded.path} was trained from --init-from {before['path']}; give it again to resume"
                )
            return None
        record = {"path": str(opts.init_from), "fingerprint": fingerprint(opts.init_from)}
        if before and before.get("fingerprint") != record["fingerprint"]:
            self.warn(
                f"{loaded.path} was trained from {before['path']}; --init-from {opts.init_from} holds other weights"
            )
        load_upstream(
            self.session.model,
            opts.init_from,
            cfg.workload,
            cfg.preset,
            masters=state.masters(self.session),
        )
        self.session.weights_loaded()  # e.g. the frozen q/k/v copies of model.fused_frozen_qkv
        return record

    def _restore(self, loaded: checkpoint.Loaded) -> int:
        st = loaded.state
        self._check_seed(loaded)
        self._note_optimizer(loaded)
        self._note_data(loaded)
        state.load_weights(self.session, loaded.weights, str(loaded.path))
        state.load_optimizer(self.session, loaded.optimizer)
        # the next step's rate as the checkpoint's schedule left it, before the configuration's sets it
        saved_rate = state.learning_rate(self.session)
        state.load_schedule(self.session, loaded.scheduler)
        self._note_schedule(loaded, saved_rate)
        return int(st["data"]["next_draw"])

    def _note_schedule(self, loaded: checkpoint.Loaded, saved_rate: float) -> None:
        """A checkpoint trained on a learning-rate schedule of another length, kind, warm-up or peak:
        the job goes on with its configuration's, from the checkpoint's position in it (the user
        changed it; :func:`state.load_schedule`), and the warning gives the next step's rate both ways."""
        changed = []
        steps = loaded.state.get("max_steps")
        if steps != self.opts.max_steps:
            changed.append(f"--max-steps {steps}, now {self.opts.max_steps}")
        trained = _trained_config(loaded).get("optimizer")
        for key in SCHEDULE_SHAPE:
            was = trained.get(key) if isinstance(trained, dict) else None
            now = getattr(self.cfg.optimizer, key)
            if was is not None and was != now:
                changed.append(f"optimizer.{key} {was!r}, now {now!r}")
        if changed:
            step = loaded.step + 1
            self.warn(
                f"{loaded.path} was trained on another learning-rate schedule ({'; '.join(changed)}); "
                f"this job's is used from step {step} on, at the checkpoint's position in it: learning "
                f"rate {state.learning_rate(self.session):.4g} at step {step}, where the checkpoint's "
                f"gives {saved_rate:.4g}"
            )

    def _check_seed(self, loaded: checkpoint.Loaded) -> None:
        """Without ``--init-from`` the frozen weights are drawn from the seed, and a checkpoint holds
        only the trainable ones: another seed would go on training them beside other frozen weights
        (and export would rebuild those from the seed of the newest checkpoint)."""
        seed = _trained_config(loaded).get("seed")
        if self.opts.init_from is None and seed is not None and seed != self.cfg.seed:
            raise ConfigError(
                f"seed: {self.cfg.seed}: {loaded.path} was trained with seed {seed}, whose random frozen "
                f"weights (no --init-from) this job would not have; allowed: seed {seed} to resume it, "
                f"or another --output-dir"
            )

    def _note_optimizer(self, loaded: checkpoint.Loaded) -> None:
        """Another optimizer implementation or placement takes the saved state over (the moments as
        it stores them: 8- or 4-bit ones requantized), and other betas, eps or weight decay apply
        from the next step (:data:`state.CONFIGURED`): the job goes on, but not as the one it was."""
        optimizer = _trained_config(loaded).get("optimizer")
        optimizer = optimizer if isinstance(optimizer, dict) else {}
        impl, offload = optimizer.get("impl"), optimizer.get("offload", False)
        if impl is not None and impl != self.cfg.optimizer.impl:
            self.warn(
                f"{loaded.path} was trained with optimizer.impl {impl}; this job goes on with "
                f"{self.cfg.optimizer.impl}, which takes its optimizer state over"
            )
        changed = [
            f"optimizer.{key} {_plain(optimizer[key])!r}, now {_plain(getattr(self.cfg.optimizer, key))!r}"
            for key in state.CONFIGURED
            if key in optimizer
            and _plain(optimizer[key]) != _plain(getattr(self.cfg.optimizer, key))
        ]
        if changed:
            self.warn(
                f"{loaded.path} was trained with {'; '.join(changed)}; this job trains on its own "
                f"from step {loaded.step + 1} on"
            )
        if isinstance(offload, bool) and offload != self.cfg.optimizer.offload:
            where = "host" if self.cfg.optimizer.offload else "device"
            self.warn(
                f"{loaded.path} was trained with optimizer.offload {str(offload).lower()}; this job "
                f"goes on with {str(not offload).lower()}: its optimizer state moves to the {where}"
            )

    def _note_data(self, loaded: checkpoint.Loaded) -> None:
        """The data a checkpoint was trained on, against this job's: a resume goes on with the
        data position it saved, which another dataset or batch size does not continue exactly.
        A dataset left off the command is refused, as a forgotten --init-from is."""
        trained = _trained_config(loaded)
        data = trained.get("data") if isinstance(trained.get("data"), dict) else {}
        first = self.session.workload.data_sources()[0]
        before, now = _data_named(data, first), _data_named(to_dict(self.cfg.data), first)
        if data.get("dataset") and not self.cfg.data.dataset:
            raise ConfigError(
                f"{loaded.path} was trained on --dataset {data['dataset']}; give it again to resume "
                f"(or --dataset DIR to go on with another, or another --output-dir)"
            )
        if before != now:
            self.warn(f"{loaded.path} was trained on {before}; this job goes on with {now}")
        batch = trained.get("batch_size")
        if batch is not None and batch != self.cfg.batch_size:
            self.warn(
                f"{loaded.path} was trained with batch_size {batch}; this job goes on with "
                f"{self.cfg.batch_size} from the same data position"
            )

    def _note_samples(self, loaded: checkpoint.Loaded) -> None:
        """The same dataset folder holding other samples (episodes added or removed)."""
        data = loaded.state.get("data")
        before = data.get("num_samples") if isinstance(data, dict) else None
        if before is not None and self.num_samples is not None and before != self.num_samples:
            self.warn(
                f"{loaded.path} was trained on {before} samples; the data now holds "
                f"{self.num_samples}, drawn in another order than the uninterrupted job's"
            )

    def _batches(self, next_draw: int):
        s, cfg = self.session, self.cfg
        loader = s.workload.make_loader(
            cfg.preset,
            cfg.data,
            cfg.batch_size,
            seed=cfg.seed,
            rank=self.rank,
            world_size=self.world,
        )
        self.num_samples = len(loader.dataset) if hasattr(loader, "dataset") else None
        shield_workers(loader)
        return s.batches(position_loader(loader, next_draw, cfg.batch_size, self.world))

    # -- the loop -----------------------------------------------------------------------------------
    def run(self) -> JobResult:
        self.control.catch_signals()
        try:
            return self._run()
        finally:
            self.control.release()
            try:
                self.writer.wait()
            finally:
                self.buffers.release()
                self.control.drain()
                self.session.close()

    def _run(self) -> JobResult:
        loaded = self._resume_point()
        if loaded is not None and self.rank == 0:  # first, before what the resume may warn of
            print(
                hide_secrets(
                    f"autotune: resuming from {loaded.path} "
                    f"(step {loaded.step} of {self.opts.max_steps} done)"
                ),
                file=sys.stderr,
                flush=True,
            )
        self.init_record = self._init_weights(loaded)
        fresh_rng = state.rng_state(self.device)
        next_draw = self._restore(loaded) if loaded else 0
        self.start = loaded.step if loaded else 0
        batches = self._batches(next_draw)
        if loaded is not None:
            self._note_samples(loaded)
            if self.rank < len(loaded.rng):
                state.set_rng_state(loaded.rng[self.rank], self.device)
            else:
                self.warn(
                    f"{loaded.path} has random states for {len(loaded.rng)} ranks; rank {self.rank} starts afresh"
                )
        else:
            state.set_rng_state(fresh_rng, self.device)  # whatever building the loader drew
        self.next_draw0 = next_draw
        loop = Loop(self, batches)
        try:
            preempted = loop.run()
        finally:
            batches.close()  # its loader's workers stop now, whatever holds this frame
        return self._result(loaded, preempted, loop)

    # -- checkpoints -------------------------------------------------------------------------------
    def reserve(self) -> None:
        """Rank 0 of a job that will checkpoint allocates its host buffers after its first step (a
        warm-up step: compilation, capture), so that no checkpoint stalls for the allocation."""
        if self.rank != 0 or not (self.opts.save_steps or self.opts.stop_at):
            return
        self.buffers_s = state.reserve(self.session, self.buffers)

    def save(self, step: int) -> None:
        """A checkpoint of ``step`` (collective): the stall is the host copy; the write runs behind."""
        begin = time.perf_counter()
        rngs = self.control.gather(state.rng_state(self.device))
        if self.rank != 0:
            return
        self.writer.wait()  # the buffers of the write before are reused
        weights, optimizer = state.capture(self.session, self.buffers)
        cfg = self.cfg
        draws = self.draws
        next_draw = self.next_draw0 + (step - self.start) * draws
        st = {
            "step": step,
            "max_steps": self.opts.max_steps,
            "workload": cfg.workload,
            "preset": cfg.preset,
            "world_size": self.world,
            "batch_size": cfg.batch_size,
            "data": {
                "next_draw": next_draw,
                "draws_per_step": draws,
                "num_samples": self.num_samples,
                "epoch": next_draw // self.num_samples if self.num_samples else None,
            },
            "init_from": self.init_record,
            "init_device": self.device.type,
            "config": to_dict(cfg),
        }
        snap = checkpoint.Snapshot(
            step,
            weights,
            optimizer,
            state.schedule_to_host(self.session),
            rngs,
            st,
            dump_config(cfg),
        )
        record = checkpoint.WriteRecord(
            step,
            str(self.out / f"{checkpoint.PREFIX}{step}"),
            snapshot_s=time.perf_counter() - begin,
        )
        self.writer.submit(snap, record)

    # -- result ------------------------------------------------------------------------------------
    def _result(self, loaded, preempted: bool, loop) -> JobResult:
        bad = next((i for i, v in enumerate(self.losses) if not math.isfinite(v)), None)
        if bad is not None:
            raise TrialError(f"the loss is not finite at step {self.start + bad + 1}", "nan")
        self.writer.wait()
        steady = (
            self.times[min(len(self.times) - 1, warmup_steps(self.cfg, 0)) :] if self.times else []
        )
        draws = self.draws
        median = statistics.median(steady) if steady else None
        return JobResult(
            start_step=self.start + 1,
            final_step=self.start + len(self.losses),
            max_steps=self.opts.max_steps,
            losses=self.losses,
            grad_norms=self.norms,
            resumed_from=str(loaded.path) if loaded else None,
            preempted=preempted,
            stopped_by=self.control.stopped_by if preempted else None,
            checkpoints=[r.to_dict() for r in self.writer.records],
            samples_per_s=draws / median if median else None,
            samples_per_s_overall=draws * len(steady) / sum(steady) if steady else None,
            step_time_ms=median * 1e3 if median else None,
            steady_steps=len(steady),
            steady_s=sum(steady),
            world_size=self.world,
            batch_size=self.cfg.batch_size,
            output_dir=str(self.out),
            init_from=str(self.opts.init_from) if self.opts.init_from else None,
            warnings=self.warnings,
            profile=loop.profile,
            host_buffers_s=self.buffers_s,
        )


def run_job(cfg: TrainConfig, opts: JobOptions) -> JobResult:
    """Train ``cfg`` as one rank of the job ``opts`` describes (see the module docstring)."""
    return Job(cfg, opts).run()
