"""Host memory page-locked for CUDA for exactly as long as it is mapped.

``cudaHostRegister`` locks a range of virtual addresses. Memory freed while still registered keeps
its registration: the next allocation at those addresses is refused as already registered (or
mapped), and a copy into it is routed by the stale registration to the freed pages, so the new
buffer never sees the data. A checkpoint's host buffers are views handed out to the caller (a
loaded optimizer state, a test's snapshot), so their memory can outlive the object that made it;
:class:`LockedMemory` ties the lock to the memory itself: an anonymous mapping (page-aligned, whole
pages of its own, so no two buffers share a locked page) that a tensor made with
``torch.frombuffer`` keeps alive, and that unlocks itself before it is unmapped.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap

import torch


class LockedMemory(mmap.mmap):
    """An anonymous mapping of ``length`` bytes; :meth:`lock` page-locks it until :meth:`unlock` or
    until it is collected (its finalizer runs before the mapping is released)."""

    locked = False

    @classmethod
    def of(cls, nbytes: int) -> LockedMemory:
        """Whole pages for at least ``nbytes``, page-locked where CUDA allows (:attr:`locked`)."""
        pages = -(-max(nbytes, 1) // mmap.PAGESIZE) * mmap.PAGESIZE
        memory = cls(-1, pages)
        memory.lock()
        return memory

    @property
    def address(self) -> int:
        view = ctypes.c_char.from_buffer(self)
        try:
            return ctypes.addressof(view)
        finally:
            del view  # the buffer export, which would keep the mapping from closing

    def lock(self) -> bool:
        """Page-lock the mapping; False where CUDA refuses (a locked-memory limit): the memory is
        then ordinary pageable memory, and copies into it are synchronous."""
        if not self.locked:
            self.locked = self._lock_range(self.address, len(self))
        return self.locked

    def unlock(self) -> None:
        if self.locked:
            self.locked = False
            self._unlock_range(self.address)

    def tensor(self) -> torch.Tensor:
        """The mapping as a flat uint8 tensor, which keeps the mapping (and so its lock) alive."""
        return torch.frombuffer(self, dtype=torch.uint8)

    @staticmethod
    def _lock_range(address: int, nbytes: int) -> bool:
        if int(torch.cuda.cudart().cudaHostRegister(address, nbytes, 0)) == 0:
            return True
        _clear_cuda_error()
        return False

    @staticmethod
    def _unlock_range(address: int) -> None:
        torch.cuda.cudart().cudaHostUnregister(address)

    def __del__(self) -> None:
        # at interpreter exit CUDA may be gone before us; the process's end unlocks everything
        with contextlib.suppress(Exception):  # a finaliser must not raise
            self.unlock()


def _clear_cuda_error() -> None:
    """Consume the CUDA runtime's last error that a refused ``cudaHostRegister`` leaves set: torch
    reads it after its next kernel launch and would raise there, far from the cause. A kernel
    launched here reads it through torch's own runtime (however torch links it) and raises it now."""
    with contextlib.suppress(RuntimeError):
        torch.zeros(1, device="cuda")
