"""How much memory this process may use (``autotune.memlimit``): the machine's, or its cgroup's limit.

The parser reads a folder made here that imitates ``/proc`` and ``/sys/fs/cgroup``; the last tests
run in a real memory cgroup where one can be made (root).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotune.memlimit import MemoryLimit, memory_limit
from tests.memcgroup import memory_cgroup

ROOT = Path(__file__).resolve().parents[1]
GIB = 2**30
MACHINE = 24 * GIB
V2_MOUNT = "31 23 0:28 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate"
V1_MOUNT = "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory"
V1_UNLIMITED = 9223372036854771712


def fake_root(tmp_path: Path, cgroup: str, mounts: list[str], available: int = 20 * GIB) -> Path:
    """A folder standing for ``/``: this process in ``cgroup`` (/proc/self/cgroup's text), the
    cgroup hierarchies mounted as ``mounts`` say, and a machine of 24 GiB."""
    root = tmp_path / "root"
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/cgroup").write_text(cgroup)
    (root / "proc/self/mountinfo").write_text("\n".join(mounts) + "\n")
    (root / "proc/meminfo").write_text(
        f"MemTotal:       {MACHINE >> 10} kB\nMemFree:        1024 kB\n"
        f"MemAvailable:   {available >> 10} kB\n"
    )
    return root


def limit_files(folder: Path, **files: str | int) -> None:
    """``memory_max="max"`` writes ``memory.max``, and so on."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, value in files.items():
        (folder / name.replace("_", ".", 1)).write_text(f"{value}\n")


def test_without_a_limit_the_machines_memory_counts(tmp_path):
    root = fake_root(tmp_path, "0::/user.slice\n", [V2_MOUNT])
    limit_files(root / "sys/fs/cgroup/user.slice", memory_max="max", memory_current=GIB)
    assert memory_limit(root) == MemoryLimit(MACHINE, 20 * GIB, cgroup=False)
    assert memory_limit(root).origin == ""


def test_the_tightest_limit_above_the_processs_own_cgroup_counts(tmp_path):
    """A container's limit on its own cgroup, the process in a child of it without one."""
    root = fake_root(tmp_path, "0::/box/app\n", [V2_MOUNT])
    cgroups = root / "sys/fs/cgroup"
    limit_files(cgroups / "box", memory_max=3 * GIB // 2, memory_current=GIB)
    limit_files(cgroups / "box/app", memory_max="max", memory_current=GIB // 2)
    got = memory_limit(root)
    assert got == MemoryLimit(3 * GIB // 2, GIB // 2, cgroup=True)
    assert got.origin == "the cgroup's limit"


def test_a_capped_child_cgroup_bounds_what_is_still_available(tmp_path):
    """A scheduler's job step capped below its job, whose own limit is not reached."""
    root = fake_root(tmp_path, "4:memory:/elsewhere\n0::/job/step\n", [V2_MOUNT])
    cgroups = root / "sys/fs/cgroup"
    limit_files(cgroups, memory_max="max")
    limit_files(cgroups / "job", memory_max=8 * GIB, memory_current=GIB)
    limit_files(cgroups / "job/step", memory_max=3 << 20, memory_current=1 << 20)
    assert memory_limit(root) == MemoryLimit(3 << 20, 2 << 20, cgroup=True)


@pytest.mark.parametrize(
    "limit, expected",
    [(V1_UNLIMITED, MemoryLimit(MACHINE, 20 * GIB, False)), (GIB, MemoryLimit(GIB, GIB // 2, True))],
    ids=["unlimited", "1GiB"],
)  # fmt: skip
def test_cgroup_v1_memory_limit_in_bytes(tmp_path, limit, expected):
    """v1's unlimited is 2**63 less a page: no limit, not 8 EiB."""
    cgroup = "9:name=systemd:/\n4:memory:/process_api/abc\n3:cpuset:/\n0::/\n"
    root = fake_root(tmp_path, cgroup, [V1_MOUNT, V2_MOUNT.replace("/sys/fs/cgroup ", "/x ")])
    folder = root / "sys/fs/cgroup/memory/process_api/abc"
    limit_files(folder, memory_limit_in_bytes=limit, memory_usage_in_bytes=GIB // 2)
    assert memory_limit(root) == expected


def test_a_container_without_a_cgroup_namespace_reads_the_top_of_its_mount(tmp_path):
    """/proc/self/cgroup names the host's path; the container's mount shows that cgroup at its top."""
    mount = "40 30 0:29 /docker/abc /sys/fs/cgroup ro,nosuid - cgroup2 cgroup2 rw"
    root = fake_root(tmp_path, "0::/docker/abc\n", [mount])
    limit_files(root / "sys/fs/cgroup", memory_max=2 * GIB, memory_current=GIB)
    assert memory_limit(root) == MemoryLimit(2 * GIB, GIB, cgroup=True)


def test_a_limit_above_the_machines_memory_is_the_machines(tmp_path):
    root = fake_root(tmp_path, "0::/big\n", [V2_MOUNT])
    limit_files(root / "sys/fs/cgroup/big", memory_max=64 * GIB, memory_current=GIB)
    assert memory_limit(root) == MemoryLimit(MACHINE, 20 * GIB, cgroup=False)


@pytest.mark.parametrize("damage", ["no-cgroup-file", "no-mounts", "limit-not-a-number"])
def test_what_cannot_be_read_is_no_limit(tmp_path, damage):
    root = fake_root(tmp_path, "0::/box\n", [V2_MOUNT])
    limit_files(root / "sys/fs/cgroup/box", memory_max=GIB, memory_current=0)
    if damage == "no-cgroup-file":
        (root / "proc/self/cgroup").unlink()
    elif damage == "no-mounts":
        (root / "proc/self/mountinfo").write_text("")
    else:
        (root / "sys/fs/cgroup/box/memory.max").write_text("1G\n")
    assert memory_limit(root) == MemoryLimit(MACHINE, 20 * GIB, cgroup=False)


LIMIT = 1536 << 20
PRINT_LIMIT = (
    "from autotune.memlimit import memory_limit; l = memory_limit(); print(l.total, l.cgroup)"
)


@pytest.fixture
def capped() -> Path:
    """A real memory cgroup limited to 1.5 GiB, removed once its processes are gone."""
    cgroup = memory_cgroup(f"autotune-memlimit-{os.getpid()}", LIMIT)
    if cgroup is None:
        pytest.skip("no memory cgroup can be made here (needs root, or a delegated controller)")
    yield cgroup
    deadline = time.monotonic() + 30
    while (cgroup / "cgroup.procs").read_text().strip() and time.monotonic() < deadline:
        time.sleep(0.2)
    cgroup.rmdir()


def in_cgroup(cgroup: Path, *argv: str, **kwargs) -> subprocess.Popen:
    """``argv`` started inside ``cgroup``."""
    enter = f'echo $$ > {cgroup}/cgroup.procs && exec "$@"'
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(["sh", "-c", enter, "sh", *argv], cwd=ROOT, env=env, **kwargs)


def test_a_real_cgroups_limit_is_read(capped):
    proc = in_cgroup(capped, sys.executable, "-c", PRINT_LIMIT, stdout=subprocess.PIPE, text=True)
    out, _ = proc.communicate(timeout=60)
    assert out.split() == [str(LIMIT), "True"]


@pytest.mark.slow
def test_run_in_a_capped_cgroup_budgets_the_cgroups_limit_and_says_so(capped, tmp_path):
    """``autotune run`` on a CPU printed the machine's 23.5 GiB as its memory budget inside a
    cgroup capped at 1.5 GiB. Stopped (SIGTERM) once the line is out: the budget is all it shows."""
    argv = ["-m", "autotune", "run", "--synthetic", "--trials", "1", "--out", str(tmp_path / "r")]
    proc = in_cgroup(capped, sys.executable, *argv, stdout=subprocess.PIPE, text=True)
    try:
        line = next((line for line in proc.stdout if "memory budget" in line), "")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=120)
    assert "memory budget 1.5 GiB (the cgroup's limit), folder " in line, line
