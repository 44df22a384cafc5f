"""A memory cgroup of a test's own, limited: where the OOM killer acts, or what a container caps."""

from __future__ import annotations

from pathlib import Path


def memory_cgroup(name: str, limit: int) -> Path | None:
    """A child of this process's memory cgroup limited to ``limit`` bytes (None where none can be made:
    not root, or cgroup v2 without the memory controller delegated). Its processes are started with
    ``sh -c 'echo $$ > CGROUP/cgroup.procs && exec ...'``; the caller removes it once they are gone."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            base, limit_file = (
                Path("/sys/fs/cgroup/memory", path.lstrip("/")),
                "memory.limit_in_bytes",
            )
        elif controllers == "":
            base, limit_file = Path("/sys/fs/cgroup", path.lstrip("/")), "memory.max"
        else:
            continue
        child = base / name
        try:
            child.mkdir()
            (child / limit_file).write_text(str(limit))
            return child
        except OSError:
            if child.exists():
                child.rmdir()
    return None
