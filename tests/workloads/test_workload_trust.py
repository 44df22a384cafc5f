"""A workload named ``module:Class`` (on the command line or in a configuration file) is checked to
be a Workload before anything of it is called: ``subprocess:Popen`` is refused with one line, and a
class that is not a Workload is never instantiated."""

from __future__ import annotations

import json

import pytest

from autotune.errors import WorkloadError
from autotune.workloads import get_workload
from tests.clirun import autotune, one_line_error

NOT_A_WORKLOAD = """
from pathlib import Path

class Marker:
    def __init__(self):
        Path(__file__).with_name("instantiated").write_text("yes")
"""


def test_a_class_that_is_not_a_workload_is_never_instantiated(tmp_path):
    (tmp_path / "marker.py").write_text(NOT_A_WORKLOAD)
    config = tmp_path / "config.yaml"
    config.write_text(f"workload: {tmp_path / 'marker.py'}:Marker\n")
    line = one_line_error(autotune("train", "--config", config, "--steps", "1", cwd=tmp_path))
    assert line == (
        f"autotune: error: {config}: workload '{tmp_path / 'marker.py'}:Marker': Marker is the "
        "class Marker, "
        "not a subclass of autotune.workloads.Workload (nor an instance of one)"
    )
    assert not (tmp_path / "instantiated").exists()


def test_popen_named_as_a_workload_is_refused_before_it_runs(tmp_path):
    line = one_line_error(
        autotune("run", "--workload", "subprocess:Popen", "--out", tmp_path / "run")
    )
    assert "'subprocess:Popen': Popen is the class Popen, not a subclass of" in line
    assert not (tmp_path / "run").exists()
    with pytest.raises(WorkloadError, match=r"'os:system': system is a builtin_function_or_method"):
        get_workload("os:system")


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        (":", "a module (or file) and a class are both needed"),
        (".relative:Job", "a module (or file) and a class are both needed"),
        ("json:", "a module (or file) and a class are both needed"),
        ("{tmp}:Job", "{tmp}: is not a file"),
        ("{tmp}/a\0b.py:Job", "embedded null byte"),
    ],
    ids=["empty", "relative", "no-class", "folder", "nul-byte"],
)
def test_a_malformed_workload_name_is_one_line(tmp_path, capsys, spec, reason):
    """Empty, relative and NUL-holding names reached importlib, whose errors were tracebacks; a
    folder named as the file was 'no such file'."""
    from autotune.cli import main

    spec, reason = spec.format(tmp=tmp_path), reason.format(tmp=tmp_path)
    with pytest.raises(WorkloadError) as caught:
        get_workload(spec)
    assert str(caught.value) == (
        f"workload {spec!r} cannot be imported: {reason}; give path/to/file.py:Class or "
        "package.module:Class"
    )
    if "\0" not in spec:  # a command line cannot hold a NUL; a configuration file can
        assert main(["inspect", "--workload", spec]) == 2
        assert capsys.readouterr().err == f"autotune: error: {caught.value}\n"


@pytest.mark.parametrize(
    ("code", "raised"),
    [
        ('raise RuntimeError("no GPU for hf_probe_secret_77")', "RuntimeError: no GPU for ***"),
        ("x = undefined_name", "NameError: name 'undefined_name' is not defined"),
        (
            'open("/nonexistent/weights.bin")',
            "FileNotFoundError: [Errno 2] No such file or directory",
        ),
    ],
    ids=["runtime-error", "name-error", "os-error"],
)
def test_a_workload_module_that_raises_as_it_runs_is_one_line(
    tmp_path, monkeypatch, capsys, code, raised
):
    """The module's own code failing at import (a typo, a check of its own) is the user's to fix:
    one line naming the exception and the module's line, a secret of the environment hidden."""
    (tmp_path / "job.py").write_text(f"import os\n{code}\n")
    spec = f"{tmp_path / 'job.py'}:Job"
    from autotune.cli import main

    monkeypatch.setenv("MY_TOKEN", "hf_probe_secret_77")
    assert main(["inspect", "--workload", spec]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    line = err.strip()
    assert line.startswith(
        f"autotune: error: workload {spec!r} cannot be imported: its module raised {raised}"
    ), line
    assert line.endswith(f" at {tmp_path / 'job.py'}:2 (rerun with --debug for the traceback)")


def test_a_workload_file_named_as_a_module_already_imported_is_named(tmp_path, capsys):
    """A file json.py (or a second folder's file of a name imported first) gave Python's json:
    "module 'json' has no attribute 'Job'", or silently another file's workload."""
    (tmp_path / "json.py").write_text("class Job:\n    pass\n")
    spec = f"{tmp_path / 'json.py'}:Job"
    from autotune.cli import main

    assert main(["inspect", "--workload", spec]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"autotune: error: workload {spec!r} cannot be imported: {tmp_path / 'json.py'}: its module "
        f"name 'json' is taken by {json.__file__}; rename the file"
    ), err
