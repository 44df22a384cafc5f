"""AdamW over fp32 master weights in one pass: ``optimizer.impl: master``.

Under bf16 autocast a linear layer's fp32 weight is cast to bf16 at every forward (read 4 bytes,
write 2 a weight) and its bf16 gradient cast back to fp32 in the backward (read 2, write 4), and
AdamW then reads that fp32 gradient. Here such a weight is stored in bf16 (the value autocast's
cast would give), its fp32 value lives in the optimizer as a master, and the update reads the bf16
gradient, the master and both moments once and writes the master, the moments and the bf16 weight
once. The forward and backward compute what they computed (the same bf16 operands, the same bf16
gradient) and the update is AdamW's on the same fp32 values: exact to float rounding
(``tests/train/test_optim_master.py``). Which weights qualify is the precision map's call
(:func:`autotune.train.precision.autocast_only_params`); every other trainable tensor is updated
in fp32 as before, by the same pass.

On CUDA the update is a Triton kernel over tables of every tensor
(:mod:`autotune.train.optim.master_kernels`): one launch per kind of tensor, however many tensors; so
is the gradient norm (partial sums of squares in fp32) once the tables exist. A block of a table
whose gradient and moments are all zeros (an embodiment slot no sample has used) takes the decay
alone, the same numbers as its full update (see the kernels' module). Elsewhere, and for a
gradient the kernels cannot take, the same arithmetic runs as torch ops (the norm: torch's
multi-tensor norm, each tensor's in fp32). Nothing syncs the host, so the step can be captured in a CUDA
graph; the tables hold the gradients' addresses, so a captured update needs
:meth:`MasterAdamW.prepare` once its gradients exist (``StepGraph`` and ``OverlapStepGraph`` call it
between their captures).

Checkpoints see the fp32 master as the weight (``autotune.train.job.state``), so they are the same
files as with the other implementations; the masters are not repeated in the optimizer's state.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from autotune.errors import ConfigError
from autotune.train.optim.clip import ClipsInStep, run_closure

_EXP_AVG_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
"""``optimizer.exp_avg_dtype``: the first moment's storage for the weights with masters (the
update computes in fp32)."""


def bf16_with_masters(params: list[nn.Parameter]) -> dict[int, torch.Tensor]:
    """Store each of ``params`` in bf16 (rounded to nearest, as autocast casts); returns their fp32
    values by ``id`` of the parameter, the masters the optimizer updates."""
    masters = {}
    for p in params:
        masters[id(p)] = p.detach().clone(memory_format=torch.contiguous_format)
        p.data = p.data.to(torch.bfloat16)
    return masters


@dataclass
class Table:
    """The device tables of one kind of tensor (see ``optim_master_kernels``)."""

    has_weight: bool
    blocks: int
    blk_tensor: torch.Tensor
    blk_start: torch.Tensor
    numel: torch.Tensor
    index: torch.Tensor
    base: dict[str, torch.Tensor]
    """Per column (``g`` gradient, ``p`` value, ``m`` and ``v`` moments, ``w`` bf16 weight): the
    tensor that the column's offsets count from."""
    off: dict[str, torch.Tensor]
    """Per column: each tensor's start, in elements from the column's base."""
    nonzero: torch.Tensor
    """Per block (int8): 1 where this step's gradient has an element other than zero (the norm pass
    writes it; 1 for every block where the norm was taken another way)."""
    zero_state: torch.Tensor
    """Per block (int8): 1 while both moments are all zeros (the update clears it)."""


def _aligned(t: torch.Tensor) -> bool:
    return t.is_contiguous() and t.data_ptr() % 16 == 0


def _zero_blocks(m: list[torch.Tensor], v: list[torch.Tensor], block: int) -> torch.Tensor:
    """Per block of the tables' layout (each tensor's elements in runs of ``block``, its last run
    short): 1 (int8) where both moments are zeros throughout."""
    flags = []
    for a, b in zip(m, v):
        zero = ((a == 0) & (b == 0)).flatten()
        pad = -zero.numel() % block
        zero = torch.cat([zero, zero.new_ones(pad)]) if pad else zero
        flags.append(zero.view(-1, block).all(dim=1))
    return torch.cat(flags).to(torch.int8)


class MasterAdamW(ClipsInStep, torch.optim.Optimizer):
    """AdamW (decoupled weight decay, torch's bias corrections) over ``param_groups``; the
    parameters whose ``id`` is in ``masters`` are bf16 and updated through their fp32 master.

    ``step(max_norm=...)`` clips the gradients to ``max_norm`` (0: no clipping) as it reads them;
    ``clip_and_step(max_norm)`` does the same and returns the norm before clipping.
    """

    def __init__(
        self,
        param_groups: list[dict],
        *,
        lr: float,
        betas: tuple[float, float],
        eps: float,
        masters: dict[int, torch.Tensor],
        exp_avg_dtype: str = "fp32",
    ) -> None:
        device = param_groups[0]["params"][0].device
        super().__init__(param_groups, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=0.0))
        if len({(tuple(g["betas"]), g["eps"]) for g in self.param_groups}) > 1:
            raise ConfigError(
                "optimizer.impl: 'master' takes one betas and eps for every parameter group"
            )
        self.device = device
        self._device_lrs()
        self.use_kernels = device.type == "cuda"
        """Run the Triton kernels (on CUDA; the CPU runs them only in Triton's interpreter, for tests)."""
        self._params = [p for g in self.param_groups for p in g["params"]]
        self._index = {id(p): i for i, p in enumerate(self._params)}
        self._group_of = torch.tensor(
            [i for i, g in enumerate(self.param_groups) for _ in g["params"]], device=device
        )
        self._decay = torch.tensor(
            [float(g["weight_decay"]) for g in self.param_groups for _ in g["params"]],
            dtype=torch.float32,
            device=device,
        )
        self._steps = torch.zeros(len(self._params), dtype=torch.float32, device=device)
        self._masters = {i: masters[id(p)] for i, p in enumerate(self._params) if id(p) in masters}
        for i, p in enumerate(self._params):
            value = self._masters.get(i, p)
            self.state[p] = {
                "step": self._steps[i],
                "exp_avg": torch.zeros_like(value, dtype=self._exp_avg_dtype(i, exp_avg_dtype)),
                "exp_avg_sq": torch.zeros_like(value, dtype=torch.float32),
            }
        self._clip = torch.ones((), dtype=torch.float32, device=device)
        """The clip coefficient of the next update (:meth:`prepare_update` sets it)."""
        self._lrs = torch.zeros(len(self.param_groups), dtype=torch.float32, device=device)
        """The groups' learning rates of the next update, taken when its gradients were."""
        self._signature: tuple | None = None
        self._tables: list[Table] | None = []
        self._mask: tuple[list[int], torch.Tensor] | None = None
        self.last_norm: torch.Tensor | None = None

    def _exp_avg_dtype(self, i: int, setting: str) -> torch.dtype:
        """A bf16 first moment for the weights with masters (the ones the update writes in bf16);
        the other tensors (norms, biases, fp32 layers) keep theirs in fp32."""
        return _EXP_AVG_DTYPES[setting] if i in self._masters else torch.float32

    def _device_lrs(self) -> None:
        """Each group's learning rate as a device tensor: the schedule fills it, a captured step reads it."""
        for group in self.param_groups:
            if not isinstance(group["lr"], torch.Tensor):
                group["lr"] = torch.tensor(
                    float(group["lr"]), dtype=torch.float32, device=self.device
                )

    # -- masters --------------------------------------------------------------------------------
    def master(self, p: torch.Tensor) -> torch.Tensor | None:
        """The fp32 master of ``p`` (None where ``p`` is its own fp32 value)."""
        i = self._index.get(id(p))
        return None if i is None else self._masters.get(i)

    # -- state ----------------------------------------------------------------------------------
    def load_state_dict(self, state_dict: dict) -> None:
        """Torch's, except that the moments keep their dtypes (torch casts them to the parameter's,
        bf16 here) and are copied into the tensors the tables and any captured step point at."""
        kept = {p: self.state[p] for p in self._params}
        super().load_state_dict({"state": {}, "param_groups": state_dict["param_groups"]})
        self._device_lrs()
        for i, p in enumerate(self._params):
            self.state[p] = kept[p]
            saved = state_dict["state"].get(i)
            if saved is None:
                continue
            for key in ("step", "exp_avg", "exp_avg_sq"):
                kept[p][key].copy_(torch.as_tensor(saved[key]))
        self._refresh_zero_state()

    # -- tables ---------------------------------------------------------------------------------
    def prepare(self) -> None:
        """Build the tables for the gradients as they are now (outside a capture, before the update is
        captured: a capture cannot copy the tables from the host)."""
        active = self._active()
        self._tables_for(active)
        if len(active) < len(self._params):
            self._mask_for(active)

    def _mask_for(self, active: list[int]) -> torch.Tensor:
        """1.0 for the ``active`` tensors, 0.0 for the others, on the device; made outside a capture
        (:meth:`prepare`) when some tensors have no gradient."""
        if self._mask is None or self._mask[0] != active:
            if self.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
                raise RuntimeError(
                    "MasterAdamW: the tensors with gradients changed since prepare()"
                )
            mask = torch.zeros(len(self._params), dtype=torch.float32)
            mask[active] = 1.0
            self._mask = (list(active), mask.to(self.device))
        return self._mask[1]

    def _active(self) -> list[int]:
        return [i for i, p in enumerate(self._params) if p.grad is not None]

    def _ready_tables(self, active: list[int]) -> list[Table] | None:
        """The tables of the ``active`` gradients where they can be had without building them during a
        capture (None: the torch path)."""
        if not self.use_kernels:
            return None
        if self.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            return self._tables if self._signature_of(active) == self._signature else None
        return self._tables_for(active)

    def _signature_of(self, active: list[int]) -> tuple:
        """What the tables depend on: which gradients, where they are, their dtypes."""
        grads = [self._params[i].grad for i in active]
        return tuple(active), tuple(g.data_ptr() for g in grads), tuple(g.dtype for g in grads)

    def _tables_for(self, active: list[int]) -> list[Table] | None:
        """The Triton tables of the ``active`` tensors (None: not on CUDA, or a gradient the kernels
        cannot read; the torch path then runs)."""
        if not self.use_kernels:
            return None
        signature = self._signature_of(active)
        if signature == self._signature:
            return self._tables
        if self.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            raise RuntimeError(
                "MasterAdamW: the gradients moved since prepare(); call it before capturing the update"
            )
        self._signature = signature
        kinds: dict[tuple[torch.dtype, bool], list[int]] = {}
        for i in active:
            g, p = self._params[i].grad, self._params[i]
            tensors = [
                g,
                p,
                self.state[p]["exp_avg"],
                self.state[p]["exp_avg_sq"],
                self._masters.get(i, p),
            ]
            if not all(_aligned(t) for t in tensors) or g.dtype not in (
                torch.bfloat16,
                torch.float32,
            ):
                self._tables = None
                return None
            kinds.setdefault((g.dtype, i in self._masters), []).append(i)
        self._tables = [
            self._table(dtype, has_master, idx)
            for (dtype, has_master), idx in sorted(kinds.items(), key=lambda kv: str(kv[0]))
        ]
        return self._tables

    def _table(self, dtype: torch.dtype, has_master: bool, idx: list[int]) -> Table:
        from autotune.train.optim.master_kernels import BLOCK

        params = [self._params[i] for i in idx]
        numel = torch.tensor([p.numel() for p in params], dtype=torch.int64)
        nblocks = (numel + BLOCK - 1) // BLOCK
        blk_tensor = torch.repeat_interleave(torch.arange(len(idx), dtype=torch.int32), nblocks)
        first = torch.cumsum(nblocks, 0) - nblocks
        blk_start = (
            torch.arange(int(nblocks.sum()), dtype=torch.int64)
            - torch.repeat_interleave(first, nblocks)
        ) * BLOCK
        columns = {
            "g": [p.grad for p in params],
            "p": [self._masters[i] if has_master else self._params[i] for i in idx],
            "m": [self.state[p]["exp_avg"] for p in params],
            "v": [self.state[p]["exp_avg_sq"] for p in params],
        }
        columns["w"] = (
            params if has_master else columns["p"]
        )  # no weight to write: any fp32 column stands in
        base = {k: ts[0] for k, ts in columns.items()}
        off = {
            k: torch.tensor(
                [(t.data_ptr() - base[k].data_ptr()) // t.element_size() for t in ts],
                dtype=torch.int64,
            )
            for k, ts in columns.items()
        }

        def dev(t: torch.Tensor) -> torch.Tensor:
            return t.to(self.device)

        blocks = int(nblocks.sum())
        return Table(
            has_weight=has_master,
            blocks=blocks,
            blk_tensor=dev(blk_tensor),
            blk_start=dev(blk_start),
            numel=dev(numel),
            index=dev(torch.tensor(idx, dtype=torch.int64)),
            base=base,
            off={k: dev(v) for k, v in off.items()},
            nonzero=torch.ones(blocks, dtype=torch.int8, device=self.device),
            zero_state=_zero_blocks(columns["m"], columns["v"], BLOCK),
        )

    def _refresh_zero_state(self) -> None:
        """Mark again, in place, which blocks' moments are all zeros (after the moments were loaded:
        a captured update reads the flags where they are)."""
        if not self._tables:
            return  # no tables: no kernels (and, on a CPU build, no Triton to import them from)
        from autotune.train.optim.master_kernels import BLOCK

        for table in self._tables:
            idx = table.index.tolist()
            m = [self.state[self._params[i]]["exp_avg"] for i in idx]
            v = [self.state[self._params[i]]["exp_avg_sq"] for i in idx]
            table.zero_state.copy_(_zero_blocks(m, v, BLOCK))

    # -- the step -------------------------------------------------------------------------------
    @torch.no_grad()
    def step(self, closure=None, *, max_norm: float = 0.0):
        loss = run_closure(closure)
        self.last_norm = self.prepare_update(max_norm)
        self.apply_update()
        return loss

    @torch.no_grad()
    def prepare_update(self, max_norm: float = 0.0) -> torch.Tensor:
        """The first half of a step: the gradient norm (returned), the clip coefficient and the
        learning rates that :meth:`apply_update` will use, taken now (the schedule may move on
        before the update runs: ``optimizer.overlap``)."""
        active = self._active()
        if not active:
            return torch.zeros((), device=self.device)
        norm = self._norm(active)
        if max_norm > 0:
            self._clip.copy_(
                torch.clamp(max_norm / (norm + 1e-6), max=1.0)
            )  # clip_grad_norm_'s coefficient
        else:
            self._clip.fill_(1.0)
        self._lrs.copy_(
            torch.stack([torch.as_tensor(g["lr"], device=self.device) for g in self.param_groups])
        )
        return norm

    @torch.no_grad()
    def apply_update(self) -> None:
        """The second half: AdamW on every tensor with a gradient, clipped as :meth:`prepare_update` said."""
        active = self._active()
        if not active:
            return
        tables = self._tables_for(active)
        coefs = self._coefs(active)
        beta1, beta2 = self.param_groups[0]["betas"]
        eps = self.param_groups[0]["eps"]
        if tables is None:
            self._torch_update(active, coefs, self._clip, beta1, beta2, eps)
            return
        from autotune.train.optim import master_kernels as kernels

        for table in tables:
            kernels.adamw(table, coefs, self._clip.reshape(1), beta1, beta2, eps)

    def _norm(self, active: list[int]) -> torch.Tensor:
        """The global 2-norm of the active gradients, in fp32: over the tables where they are built
        for these gradients (:meth:`prepare`), else by torch's multi-tensor kernel, which needs no
        table and so can be captured with the backward that makes the gradients
        (``optimizer.overlap``)."""
        tables = self._ready_tables(active)
        if tables is not None:
            from autotune.train.optim import master_kernels as kernels

            return torch.sqrt(torch.stack([kernels.sumsq(t) for t in tables]).sum())
        for table in self._tables or []:
            table.nonzero.fill_(1)  # no block known to be without a gradient: none skipped
        # one call per gradient dtype: torch's multi-tensor path takes lists of one dtype, and a mixed
        # list falls back to a kernel per tensor
        by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
        for i in active:
            g = self._params[i].grad
            by_dtype.setdefault(g.dtype, []).append(g)
        norms = [
            n
            for grads in by_dtype.values()
            for n in torch._foreach_norm(grads, 2, dtype=torch.float32)
        ]
        return torch.linalg.vector_norm(torch.stack(norms))

    def _coefs(self, active: list[int]) -> torch.Tensor:
        """[3, n]: each tensor's step size (lr over the first bias correction), the square root of
        the second bias correction and its decay factor (1 - lr * weight decay), at the learning
        rates :meth:`prepare_update` took, after counting this step for the active tensors."""
        if len(active) == len(self._params):
            self._steps.add_(1)
        else:
            self._steps.add_(self._mask_for(active))
        beta1, beta2 = self.param_groups[0]["betas"]
        lr = self._lrs[self._group_of]
        step_size = lr / (1 - torch.pow(beta1, self._steps))
        bc2_sqrt = torch.sqrt(1 - torch.pow(beta2, self._steps))
        return torch.stack([step_size, bc2_sqrt, 1 - lr * self._decay])

    def _torch_update(
        self,
        active: list[int],
        coefs: torch.Tensor,
        clip: torch.Tensor,
        beta1: float,
        beta2: float,
        eps: float,
    ) -> None:
        """The kernels' arithmetic as torch ops, tensor by tensor."""
        for i in active:
            p = self._params[i]
            st, value = self.state[p], self._masters.get(i, p)
            g = p.grad.float() * clip
            value.mul_(coefs[2, i])
            m = st["exp_avg"].float()  # a bf16 first moment: updated in fp32, stored rounded
            m.lerp_(g, 1 - beta1)
            st["exp_avg_sq"].mul_(beta2).addcmul_(g, g, value=1 - beta2)
            denom = (st["exp_avg_sq"].sqrt() / coefs[1, i]).add_(eps)
            value.sub_(coefs[0, i] * (m / denom))
            if m is not st["exp_avg"]:
                st["exp_avg"].copy_(m)
            if i in self._masters:
                p.copy_(value)
