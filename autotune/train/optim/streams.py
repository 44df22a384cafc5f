"""AdamW stepped in shards on concurrent CUDA streams: ``optimizer.streams: N``.

torch's multi-tensor kernels (``_foreach_norm``, fused and for-each AdamW) cut their tensors into
chunks of 65,536 elements and launch at most 320 blocks of 512 threads at a time, one launch after
another on one stream. An H200 has 132 SMs: one launch does not fill it, and its tail drains before
the next starts. On the tuned ``full`` step the fused AdamW moved its ~45 GB in 85 launches at
~2.8 TB/s, against the ~4.8 TB/s the memory offers (BENCHMARKS.md). Splitting the parameters into N
shards of about equal size and stepping each on its own stream lets N launches run side by side.

Each parameter is updated, and each gradient's norm computed, by the same kernel with the same
inputs as without shards, so the parameters are the same bit for bit; the norm's per-tensor terms
are summed in the parameters' order, as ``clip_grad_norm_`` sums them. The streams fork from and
join the current stream, which is how a CUDA graph captures work on several streams. On a CPU the
shards run one after another.
"""

from __future__ import annotations

import contextlib

import torch


def split_groups(param_groups: list[dict], shards: int) -> list[dict]:
    """Each group cut into ``shards`` runs of consecutive parameters of about equal size; every
    piece keeps its group's options and gets ``shard`` (its stream's index)."""
    out = []
    for group in param_groups:
        params = list(group["params"])
        total = sum(p.numel() for p in params)
        pieces: list[list] = [[] for _ in range(shards)]
        done = 0
        for p in params:  # the shard whose share of the group this parameter starts in
            pieces[min(shards - 1, done * shards // max(1, total))].append(p)
            done += p.numel()
        out += [{**group, "params": piece, "shard": s} for s, piece in enumerate(pieces) if piece]
    return out


class StreamedAdamW(torch.optim.AdamW):
    """``torch.optim.AdamW`` over :func:`split_groups`'s groups, each shard stepped on its own stream.

    ``clip_and_step(params, max_norm)`` computes the gradient norm shard by shard, clips (the fused
    kernel takes the coefficient as its gradient scale; the others scale the gradients), steps,
    and returns the norm before clipping.
    """

    def __init__(self, param_groups: list[dict], shards: int, **kwargs) -> None:
        super().__init__(split_groups(param_groups, shards), **kwargs)
        self.shards = shards
        self._streams: list[torch.cuda.Stream] | None = None

    def _shard_groups(self) -> list[list[dict]]:
        return [[g for g in self.param_groups if g["shard"] == s] for s in range(self.shards)]

    @contextlib.contextmanager
    def _on(self, shard: int):
        """Run on shard ``shard``'s stream (forked from the current one); nothing on a CPU."""
        device = self.param_groups[0]["params"][0].device
        if device.type != "cuda":
            yield
            return
        if self._streams is None:  # made at the first (eager, uncaptured) step
            self._streams = [torch.cuda.Stream(device) for _ in range(self.shards)]
        stream = self._streams[shard]
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            yield

    def _join(self) -> None:
        if self._streams is not None:
            for stream in self._streams:
                torch.cuda.current_stream(stream.device).wait_stream(stream)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        groups = self.param_groups
        try:
            for s, shard in enumerate(self._shard_groups()):
                with self._on(s):
                    self.param_groups = shard
                    super().step()
        finally:
            self.param_groups = groups
            self._join()
        return loss

    def grad_norm(self, params: list[torch.Tensor]) -> torch.Tensor:
        """The global 2-norm of the gradients of ``params``, each tensor's term in their order."""
        terms: dict[int, torch.Tensor] = {}
        for s, shard in enumerate(self._shard_groups()):
            mine = [p for g in shard for p in g["params"] if p.grad is not None]
            if not mine:
                continue
            with self._on(s):
                # allocated on the shard's stream, read on the current one after the join: the shard's stream
                # reuses that memory only after its next fork, i.e. after what the current stream does here
                terms.update(zip(map(id, mine), torch._foreach_norm([p.grad for p in mine])))
        self._join()
        return torch.linalg.vector_norm(
            torch.stack([terms[id(p)] for p in params if id(p) in terms])
        )

    def clip_and_step(self, params: list[torch.Tensor], max_norm: float) -> torch.Tensor:
        norm = self.grad_norm(params)
        if max_norm <= 0:
            self.step()
            return norm
        if self.defaults.get("fused"):
            self.grad_scale = torch.clamp(
                (norm + 1e-6) / max_norm, min=1.0
            )  # clip_grad_norm_'s coefficient, inverted
            try:
                self.step()
            finally:
                self.grad_scale = None
            return norm
        coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
        for s, shard in enumerate(self._shard_groups()):
            with self._on(s):
                grads = [p.grad for g in shard for p in g["params"] if p.grad is not None]
                if grads:
                    torch._foreach_mul_(grads, coef)
        self._join()
        self.step()
        return norm
