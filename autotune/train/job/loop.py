"""The step loop of a job (``job.Job``): train, read each step's loss without stalling the device,
log, watch the throughput, profile when the watch asks, checkpoint, stop when every rank agrees."""

from __future__ import annotations

import contextlib
import json
import math
import statistics
from typing import TYPE_CHECKING, Any

import torch

from autotune.config.io import write_text_atomic
from autotune.errors import TrialError
from autotune.train.job.watch import MetricsLog, Progress, ThroughputWatch, likely_cause
from autotune.train.window.measure import StepTimer, synchronize
from autotune.train.window.setup import warmup_steps

if TYPE_CHECKING:
    from autotune.train.job.training import Job


class StepLog:
    """Each step's (loss, gradient norm, seconds), read once the device has finished the step.

    On CUDA the two values are copied to page-locked host memory behind the step and an event is
    recorded after them (``StepTimer``): ``poll`` hands out the steps whose events have completed,
    so the host never waits for the device to read a loss.
    """

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.timer = StepTimer(device)
        self.timer.start()
        self._values: list[torch.Tensor | None] = []
        self._read = 0

    def push(self, loss: torch.Tensor, norm: torch.Tensor) -> None:
        v = torch.stack([loss.detach().float().reshape(()), norm.detach().float().reshape(())])
        self._values.append(v.to("cpu", non_blocking=True) if self.cuda else v)
        self.timer.lap()

    def poll(self) -> list[tuple[float, float, float]]:
        out = []
        for seconds in self.timer.poll():
            v = self._values[self._read]
            self._values[self._read] = None
            self._read += 1
            out.append((float(v[0]), float(v[1]), seconds))
        return out

    def drain(self) -> list[tuple[float, float, float]]:
        """Every step pushed and not handed out yet (the device synchronised first)."""
        synchronize(self.timer.device)
        return self.poll()


class Loop:
    def __init__(self, job: Job, batches) -> None:
        self.job, self.batches = job, batches
        opts, cfg = job.opts, job.cfg
        self.step = self.done = job.start
        self.end = opts.stop_at or opts.max_steps
        rank0 = job.rank == 0
        self.progress = Progress(opts.max_steps, job.start, enabled=rank0 and opts.progress)
        self.metrics = MetricsLog(job.out, job.start) if rank0 else None
        self.watch = ThroughputWatch(cfg.provenance, job.world) if rank0 else None
        self.warm = warmup_steps(cfg, 0)
        self.window: list[tuple[int, float, float, float]] = []
        self.saved: set[int] = set()
        self.profile: dict[str, Any] | None = None
        self._profiled = False
        self._first = True
        self._reported = 0
        """Checkpoints whose event is in the metrics already."""
        self.log = StepLog(job.device)

    # -- one step ---------------------------------------------------------------------------------
    def _next_batch(self, profiling: bool):
        if self._first:
            # The loader's iterator draws its workers' base seed from torch's CPU generator when it
            # starts (DataLoader): keep that out of the training's random stream, which a resumed
            # job restores, so that a resumed and an uninterrupted run draw the same numbers.
            self._first = False
            saved = torch.get_rng_state()
            try:
                return next(self.batches)
            finally:
                torch.set_rng_state(saved)
        if profiling:
            from autotune.profiling import data_wait

            with data_wait():
                return next(self.batches)
        return next(self.batches)

    def _one(self, profiling: bool = False) -> None:
        loss, norm = self.job.session.step(self._next_batch(profiling))
        self.log.push(loss, norm)
        self.step += 1
        if (
            self.step == self.job.start + 1
        ):  # the optimizer has its state now: its host copies' buffers
            self.job.reserve()
        self._consume(self.log.poll())

    def _consume(self, done: list[tuple[float, float, float]]) -> None:
        job = self.job
        for loss, norm, seconds in done:
            self.done += 1
            job.losses.append(loss)
            job.norms.append(norm)
            job.times.append(seconds)
            if not math.isfinite(loss):
                raise TrialError(f"the loss is not finite at step {self.done}", "nan")
            self.progress.update(1)
            self.window.append((self.done, loss, norm, seconds))
            if self.done % job.opts.log_steps == 0:
                self._log()

    def _log(self) -> None:
        if not self.window:
            return
        window, self.window = self.window, []
        if self.metrics is None:
            return
        job, cfg = self.job, self.job.cfg
        step = window[-1][0]
        counted = [s for i, *_, s in window if i - job.start > self.warm]
        median = statistics.median(counted) if counted else None
        rate = cfg.batch_size * job.world / median if median else None
        loss = statistics.fmean(w[1] for w in window)
        lr = cfg.optimizer.lr * job.session.schedule.lr_lambdas[0](step - 1)
        self.metrics.scalars(
            step,
            {
                "loss": loss,
                "grad_norm": statistics.fmean(w[2] for w in window),
                "lr": lr,
                "samples_per_s": rate,
                "step_time_ms": median * 1e3 if median else None,
            },
        )
        self.progress.show(step, job.opts.max_steps, loss, rate)
        self._report_checkpoints()
        warning = self.watch.observe(step, rate) if rate is not None else None
        if warning:
            job.warnings.append(warning)
            self.progress.write(f"autotune: warning: {warning}")
            self.metrics.event({"step": step, "event": "throughput_warning", "message": warning})

    # -- checkpoints and profiles -------------------------------------------------------------------
    def _due(self, step: int) -> bool:
        every = self.job.opts.save_steps
        return bool(every) and step % every == 0

    def _save(self) -> None:
        if self.step in self.saved or self.step == self.job.start:
            return
        # Every loss up to this step is read first: on CUDA the host runs steps ahead of the
        # losses it reads, and a step whose loss is not finite has put its update into the
        # weights, which the checkpoint would keep (and a resume start from).
        self._consume(self.log.drain())
        self.job.save(self.step)
        self.saved.add(self.step)
        record = self.job.writer.records[-1] if self.job.rank == 0 else None
        if record is not None:
            self.progress.write(
                f"checkpoint-{self.step}: {record.snapshot_s:.2f} s at the step boundary, "
                f"written in the background"
            )

    def _room(self) -> int:
        every = self.job.opts.save_steps
        next_save = (self.step // every + 1) * every if every else self.end
        return min(next_save, self.end) - self.step

    def _profile_window(self) -> None:
        from autotune.profiling import classify, profile_window

        job, n = self.job, self.job.opts.profile_steps
        out = job.out / "profiles" / f"step-{self.step + 1}"
        window = profile_window(
            lambda: self._one(profiling=True),
            out_dir=out,
            rank=job.rank,
            world_size=job.world,
            wait=1,
            warmup=1,
            active=n,
            unprofiled_steps=1,
        )
        job.control.barrier()
        self._profiled = True
        if self.watch is None:
            return
        self.watch.profile_wanted = False
        found = classify(out).to_dict()
        summary = {
            "profiled_step_ms": window.profiled_step_ms,
            "unprofiled_step_ms": window.unprofiled_step_ms,
            "classification": found,
        }
        write_text_atomic(out / "classification.summary", json.dumps(summary, indent=1))
        cause = likely_cause(found, job.device.type)
        self.profile = {
            "step": self.step,
            "folder": str(out),
            "buckets": found["buckets"],
            "dominant": found["dominant"],
            "cause": cause,
        }
        job.warnings.append(cause)
        self.progress.write(
            f"autotune: {cause} (profile of steps {self.step - n} to {self.step - 1}: {out})"
        )
        self.metrics.event({"step": self.step, "event": "profile", **self.profile})

    # -- the loop ---------------------------------------------------------------------------------
    def run(self) -> bool:
        """Train to the end (or ``--stop-at``); True when a signal (SIGTERM, SIGHUP, Ctrl-C)
        stopped the job first."""
        job = self.job
        window_len = 3 + job.opts.profile_steps
        try:
            while self.step < self.end:
                want = self.watch is not None and self.watch.profile_wanted and not self._profiled
                stop, profile = job.control.exchange(profile=want)
                if stop:
                    if job.control.stopped_by == "SIGINT" and job.rank == 0:
                        saving = f"saving step {self.step}, then " if self.step > job.start else ""
                        self.progress.write(
                            f"autotune: Ctrl-C: {saving}stopping (Ctrl-C again stops at once)"
                        )
                    break
                if profile and not self._profiled and self._room() >= window_len:
                    self._profile_window()
                else:
                    self._one()
                if self._due(self.step):
                    self._save()
            preempted = self.step < self.end
            job.session.flush()  # the last step's update, where optimizer.overlap holds it for a next step
            self._save()  # always: a job that ends keeps what it trained, --save-steps or not
            synchronize(job.device)
            self._consume(self.log.poll())
            self._log()
            job.writer.wait()
            self._report_checkpoints()
            return preempted
        except BaseException:
            self._keep_measured()
            raise
        finally:
            self.progress.close()
            if self.metrics is not None:
                with contextlib.suppress(Exception):
                    self.metrics.close()

    def _keep_measured(self) -> None:
        """A failing job (an error in a step, a loss that is not finite, a second Ctrl-C) still
        logs the steps it measured since its last log line, and the checkpoints it wrote."""
        # the steps the device finished (the first whose loss is not finite raises again: ignored)
        with contextlib.suppress(Exception):
            self._consume(self.log.poll())
        with contextlib.suppress(Exception):
            self._log()
        with contextlib.suppress(Exception):
            self.job.writer.join()
            self._report_checkpoints()

    def _report_checkpoints(self) -> None:
        """The events of the checkpoints written since the last call (rank 0)."""
        if self.metrics is None:
            return
        done = self.job.writer.finished
        for r in done[self._reported :]:
            self.metrics.event({"step": r.step, "event": "checkpoint", **r.to_dict()})
        self._reported = len(done)
