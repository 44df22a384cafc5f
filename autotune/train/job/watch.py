"""What a user watches while a job trains (rank 0): the progress bar, the metrics files, and the
throughput watch against what ``best.yaml`` was measured at.

* :class:`Progress`: a tqdm bar (step, loss, samples/s, ETA) on a terminal; elsewhere (a log file)
  one line per logging window instead.
* :class:`MetricsLog`: every ``--log-steps`` steps, the window's mean loss and gradient norm, the
  learning rate, samples/s and the median step time into TensorBoard event files
  (``D/tensorboard``) and one JSON object a line (``D/metrics.jsonl``). A resumed job drops what a
  killed one logged past its checkpoint (TensorBoard's ``purge_step``; the JSONL rewritten, a line
  cut by a full disk or a kill dropped). Either that cannot be written (a full disk) stops the job
  with one line naming it.
* :class:`ThroughputWatch`: compares each window's samples/s with the provenance's (per GPU,
  scaled to this job's world size) and, when it is more than ``TOLERANCE`` below, says so once and
  asks for a short profile window; :func:`likely_cause` names the dominant bucket of its
  classification.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from autotune.boundedread import TABLE_BYTES, read_bytes
from autotune.errors import AutotuneError, free_space

TOLERANCE = 0.10
CAUSES = {
    "data_stall": "the data loader does not keep up (data.num_workers, data.prefetch_factor, data.device_prefetch)",
    "comm_wait": "gradient communication is exposed (ddp.bucket_cap_mb, ddp.graph_overlap; the interconnect)",
    "launch_overhead": "the host launches kernels slower than {device} runs them (graphs.mode, compile; a busy CPU)",
    "compute_serial": "{device} itself is slower at this work (another process on it, clocks, power or thermal limits)",
    "other": "time outside the classified work (host-side stalls between steps)",
}


class Progress:
    def __init__(self, total: int, initial: int, enabled: bool) -> None:
        self.bar = None
        self.enabled = enabled
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(
                total=total,
                initial=initial,
                unit="step",
                dynamic_ncols=True,
                disable=None,
                file=sys.stderr,
                desc="train",
            )
            if self.bar.disable:
                self.bar = None

    def update(self, steps: int) -> None:
        if self.bar is not None and steps:
            self.bar.update(steps)

    def show(self, step: int, total: int, loss: float, samples_per_s: float | None) -> None:
        rate = f"{samples_per_s:.1f}" if samples_per_s else "-"
        if self.bar is not None:
            self.bar.set_postfix(loss=f"{loss:.4f}", samples_s=rate, refresh=False)
        elif self.enabled:
            print(
                f"step {step}/{total}  loss {loss:.4f}  samples/s {rate}",
                file=sys.stderr,
                flush=True,
            )

    def write(self, line: str) -> None:
        if self.bar is not None:
            self.bar.write(line, file=sys.stderr)
        else:
            print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class MetricsLog:
    def __init__(self, output_dir: Path, start_step: int) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.jsonl = output_dir / "metrics.jsonl"
        self.tb_dir = output_dir / "tensorboard"
        # a job killed before its first checkpoint starts again from nothing; a link there (one
        # leading nowhere too) is replaced by the job's own file, never written through
        if self.jsonl.exists() or self.jsonl.is_symlink():
            self._truncate(start_step)
        self._hook = threading.excepthook
        threading.excepthook = _quiet_tensorboard(self._hook)
        self.tb = SummaryWriter(log_dir=str(self.tb_dir), purge_step=start_step + 1)
        self._file = open(self.jsonl, "a", buffering=1)  # noqa: SIM115  closed by close()

    def _truncate(self, start_step: int) -> None:
        text = ""
        if self.jsonl.exists():
            raw = read_bytes(self.jsonl, TABLE_BYTES)  # a regular file of a bounded size
            text = raw.decode("utf-8", errors="replace")
        kept = [
            line
            for line in text.splitlines()
            if (step := _step_of(line)) is not None and step <= start_step
        ]
        tmp = self.jsonl.with_suffix(".jsonl.tmp")
        tmp.unlink(missing_ok=True)  # never written through a link left there
        try:
            tmp.write_text("".join(line + "\n" for line in kept))
            tmp.replace(self.jsonl)
        except OSError as exc:  # a full disk: the log stays as it was
            error = _failed(self.jsonl, exc)  # the space left before the temporary file goes
            tmp.unlink(missing_ok=True)
            raise error from None

    def scalars(self, step: int, values: dict[str, float]) -> None:
        try:
            for key, value in values.items():
                if value is not None:
                    self.tb.add_scalar(f"train/{key}", value, step)
        except OSError as exc:  # raised again from TensorBoard's writer thread
            raise _failed(self.tb_dir, exc) from None
        self.event({"step": step, **values})

    def event(self, record: dict[str, Any]) -> None:
        try:
            self._file.write(json.dumps({"time": time.time(), **record}) + "\n")
        except OSError as exc:
            raise _failed(self.jsonl, exc) from None

    def close(self) -> None:
        threading.excepthook = self._hook
        try:
            self.tb.close()
        finally:
            self._file.close()


def _failed(path: Path, exc: OSError) -> AutotuneError:
    free = free_space(path.parent)
    return AutotuneError(
        f"{path}: writing the metrics failed ({exc.strerror or type(exc).__name__}){free}; the "
        "checkpoints written before are intact"
    )


def _quiet_tensorboard(previous):
    """``threading.excepthook`` less the traceback of TensorBoard's writer thread: it stops at an
    error (a full disk) and the next write of the job's thread raises the error again, which the
    job reports on its one line."""

    def hook(args) -> None:
        if type(args.thread).__name__ != "_AsyncWriterThread" or not isinstance(
            args.exc_value, OSError
        ):
            previous(args)

    return hook


def _step_of(line: str) -> int | None:
    """The step of a line of metrics.jsonl; None for a line that is not one (cut short)."""
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):  # nested past Python's stack: no line the job wrote
        return None
    step = record.get("step", 0) if isinstance(record, dict) else None
    return step if isinstance(step, int) else None


class ThroughputWatch:
    """Warns once when a window runs more than ``TOLERANCE`` below the provenance's samples/s."""

    def __init__(self, provenance: dict[str, Any] | None, world_size: int) -> None:
        self.expected = None
        if provenance and provenance.get("samples_per_s"):
            per_gpu = float(provenance["samples_per_s"]) / int(provenance.get("world_size") or 1)
            self.expected = per_gpu * world_size
        self.warned = False
        self.profile_wanted = False

    def observe(self, step: int, samples_per_s: float) -> str | None:
        """A warning line the first time a window falls short (and a profile is then wanted)."""
        if self.expected is None or self.warned or samples_per_s >= (1 - TOLERANCE) * self.expected:
            return None
        self.warned = self.profile_wanted = True
        short = 1 - samples_per_s / self.expected
        return (
            f"throughput: {samples_per_s:.1f} samples/s at step {step} is {100 * short:.0f} % below the "
            f"{self.expected:.1f} that best.yaml's provenance measured; profiling a few steps for the cause"
        )


DEVICE_NAMES = {"cuda": "the GPU", "cpu": "the CPU"}
"""How a cause names the device the job ran on (``torch.device.type``)."""


def likely_cause(classification: dict[str, Any], device: str = "cuda") -> str:
    """One line: the dominant bucket of a classified profile window and what it usually means, the
    device named as the job used it (``device``: ``cuda`` or ``cpu``)."""
    bucket = classification["dominant"]
    share = classification["buckets"][bucket]
    shares = ", ".join(
        f"{b} {100 * s:.0f} %" for b, s in classification["buckets"].items() if s >= 0.01
    )
    what = CAUSES.get(bucket, bucket).format(
        device=DEVICE_NAMES.get(device, f"the {device} device")
    )
    return f"likely cause: {bucket} ({100 * share:.0f} % of the step): {what} [{shares}]"
