"""How much memory this process may use: the machine's, or less where its cgroup's limit is lower.

A container, a scheduler's job or ``systemd-run -p MemoryMax=`` caps a process by its memory
cgroup, and the kernel's OOM killer acts at that limit however much memory the machine has. The
limit is the tightest of the process's cgroup and of each cgroup above it that the mount shows:
cgroup v2 ``memory.max``, cgroup v1 ``memory.limit_in_bytes`` (the cgroups of
``/proc/self/cgroup``, found under the mounts ``/proc/self/mountinfo`` lists). ``max``, a value
at least the machine's memory (v1's unlimited is 2**63 less a page) and a file that cannot be read
count as no limit.

Every figure sized from host memory comes from here: the CPU's default memory budget of
``autotune run`` (:mod:`autotune.search.budget`) and the check that a batch fits
(:mod:`autotune.train.batch_fit`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

ROOT = Path("/")
"""Where ``proc`` and the cgroup mounts are (a test passes a folder that imitates them)."""
CGROUP_ORIGIN = "the cgroup's limit"


class Files(NamedTuple):
    """A memory cgroup's files of one version."""

    limit: str
    usage: str
    events: str
    """Where the kernel counts the OOM killer's kills (``oom_kill``)."""


V2 = Files("memory.max", "memory.current", "memory.events")
V1 = Files("memory.limit_in_bytes", "memory.usage_in_bytes", "memory.oom_control")


@dataclass(frozen=True)
class MemoryLimit:
    total: int
    """Bytes this process may use at most."""
    available: int
    """Bytes it may still allocate: the machine's available memory, or what a limiting cgroup
    leaves below its limit where that is less."""
    cgroup: bool
    """Whether a cgroup's limit, not the machine's memory, sets :attr:`total`."""

    @property
    def origin(self) -> str:
        """Where :attr:`total` comes from, for a line that shows it (empty: the machine)."""
        return CGROUP_ORIGIN if self.cgroup else ""


def memory_limit(root: Path = ROOT) -> MemoryLimit:
    """This process's memory as the module docstring says; ``root`` stands for ``/``."""
    total, available = _machine(root)
    limit = total
    for cap, used in _cgroup_limits(root):
        limit = min(limit, cap)
        if used is not None:
            available = min(available, max(0, cap - used))
    return MemoryLimit(limit, min(available, limit), limit < total)


def _machine(root: Path) -> tuple[int, int]:
    """(total, available) bytes of the machine's memory (``/proc/meminfo``)."""
    try:
        lines = (root / "proc/meminfo").read_text().splitlines()
        kib = {k: int(v.split()[0]) for k, _, v in (line.partition(":") for line in lines) if v}
        return kib["MemTotal"] << 10, kib.get("MemAvailable", kib["MemTotal"]) << 10
    except (OSError, KeyError, ValueError, IndexError):  # not Linux, or a /proc hidden from us
        import psutil

        memory = psutil.virtual_memory()
        return int(memory.total), int(memory.available)


def _cgroup_limits(root: Path) -> Iterator[tuple[int, int | None]]:
    """(limit, usage or None) of each memory cgroup from this process's up to its mount's top
    that has a limit."""
    for folder, top, files in memory_cgroups(root):
        while True:
            limit = _read_int(folder / files.limit)
            if limit is not None:
                yield limit, _read_int(folder / files.usage)
            if folder == top or top not in folder.parents:
                break
            folder = folder.parent


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max": no limit


def memory_cgroups(root: Path = ROOT) -> list[tuple[Path, Path, Files]]:
    """(folder of this process's memory cgroup, the top of its mount, its files) for each
    hierarchy that has a memory controller (both on a hybrid host)."""
    mounts = _mounts(root)
    try:
        lines = (root / "proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        version = "v2" if controllers == "" else "v1" if "memory" in controllers.split(",") else ""
        if version in mounts:
            point, mount_root = mounts[version]
            found.append((_folder(point, mount_root, path), point, V2 if version == "v2" else V1))
    return found


def _folder(point: Path, mount_root: str, path: str) -> Path:
    """The folder of cgroup ``path`` under a mount of the hierarchy from ``mount_root`` on: a
    container's mount shows its own cgroup at the top, whose path /proc/self/cgroup may still
    give in full (no cgroup namespace) or as ``/`` (one)."""
    if Path(path).is_relative_to(mount_root):
        return point / Path(path).relative_to(mount_root)
    return point


def _mounts(root: Path) -> dict[str, tuple[Path, str]]:
    """``v2`` / ``v1`` -> (mount point, the cgroup at its top) of the cgroup2 mount and of the
    cgroup v1 mount of the memory controller."""
    try:
        lines = (root / "proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return {}
    mounts: dict[str, tuple[Path, str]] = {}
    for line in lines:
        fields = line.split()
        if "-" not in fields[4:]:
            continue
        after = fields.index("-", 4)
        kind, options = fields[after + 1], fields[after + 3] if len(fields) > after + 3 else ""
        version = "v2" if kind == "cgroup2" else "v1" if kind == "cgroup" else ""
        if version == "v1" and "memory" not in options.split(","):
            continue
        if version and version not in mounts:
            mounts[version] = (root / fields[4].lstrip("/"), fields[3])
    return mounts
