"""Fixtures every test may take: the session's shared run folders of real tiny CPU studies; each
test's share of the host among pytest-xdist's workers (``tests/hostshare.py``).

Every training process the tests start (trials, jobs, the suite's own torch) runs one CPU thread
unless ``OMP_NUM_THREADS`` says otherwise: the tiny models' operators are too small to gain from a
second thread, and on a 2-core host where any other process runs, two OpenMP threads wait on each
other at every operator (a tiny gr00t_n16 step took 0.5 s with two threads against 0.05 s with one).
Set before anything imports torch; ``autotune.train.trial.launch`` keeps a value already set.
"""

import os
import signal

os.environ.setdefault("OMP_NUM_THREADS", "1")

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    # A suite started in the background by a non-interactive shell (``cmd &``) inherits SIGINT ignored,
    # and every process it starts would too: the Ctrl-C tests send SIGINT to processes that must take
    # it as from a terminal. A handler, unlike an ignored signal, is not inherited across exec.
    signal.signal(signal.SIGINT, signal.default_int_handler)

import pytest  # noqa: E402

from tests.hostshare import HostShare, shared_root  # noqa: E402
from tests.studies import failed_run, failed_run_printed, quick_run, quick_run_printed  # noqa: E402, F401


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Each test, with its fixtures' setup and teardown, holds its share of the host (``tests/hostshare.py``)."""
    share = getattr(item.config, "_host_share", None)
    if share is None:
        # pytest makes the session's temporary folders through this factory (the tmp_path_factory fixture's)
        root = shared_root(item.config._tmp_path_factory.getbasetemp())
        share = item.config._host_share = HostShare(root) if root else False
    if not share:
        yield
        return
    with share.held(item.get_closest_marker("exclusive") is not None):
        yield


def pytest_collection_modifyitems(config, items):
    """Test files in the order the xdist workers take them up: files with an exclusive test first
    (their wait for the other workers' tests is shortest at the start); then files with slow tests,
    more tests first; then the rest, fewer tests first, so that files of many short tests fill the
    workers' last minutes instead of one long test holding the end of the session."""
    files: dict[str, list] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::", 1)[0], []).append(item)

    def key(tests: list) -> tuple[int, int]:
        if any(t.get_closest_marker("exclusive") for t in tests):
            return (0, -len(tests))
        if any(t.get_closest_marker("slow") for t in tests):
            return (1, -len(tests))
        return (2, len(tests))

    items[:] = [item for tests in sorted(files.values(), key=key) for item in tests]


def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (addopts): on a CPU host one worker more than its cores, at least three and at
    most six: most tests wait on processes they start or on their timeouts, so three keep a 2-core
    machine's CPUs busier than two do, and each worker's test processes take ~1 GB; one process
    where there is a CUDA device, whose tests time their kernels on it.
    $PYTEST_XDIST_AUTO_NUM_WORKERS says otherwise."""
    import torch

    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return int(os.environ["PYTEST_XDIST_AUTO_NUM_WORKERS"])
    if torch.cuda.is_available():
        return 0
    from autotune.config.compat import usable_cpus

    return min(6, max(3, usable_cpus() + 1))


@pytest.fixture
def torch_config():
    """``torch_config(module, name=value, ...)``: a torch config module's values (Inductor's,
    AOTAutograd's) for one test, set through the module's own ``patch``. pytest's ``monkeypatch``
    restores an attribute it did not find in the instance ``__dict__`` by deleting it, and deleting
    an entry of a torch config module hides it for the rest of the process: a later test, or torch
    itself, reading it then fails with AttributeError."""
    import contextlib

    with contextlib.ExitStack() as stack:

        def patch(module, **values):
            stack.enter_context(module.patch(values))

        yield patch
