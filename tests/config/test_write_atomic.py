"""A file the tool writes whole or not at all: on a full disk the old file stands, no temporary file
is left, and the error names the file (the command's one line prints it)."""

from __future__ import annotations

import errno
import subprocess

import pytest

from autotune.config.io import write_text_atomic


@pytest.fixture
def small_tmpfs(tmp_path):
    """A tmpfs of 64 KiB (mounting needs root: elsewhere the test is skipped)."""
    folder = tmp_path / "tmpfs"
    folder.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)]
    if subprocess.run(mount, capture_output=True).returncode != 0:
        pytest.skip("mounting a tmpfs needs root")
    yield folder
    subprocess.run(["umount", str(folder)], check=True)


def test_a_full_disk_keeps_the_old_file_and_names_the_new_one(small_tmpfs):
    path = small_tmpfs / "best.yaml"
    path.write_text("old: 1\n")
    with pytest.raises(OSError) as caught:
        write_text_atomic(path, "x" * (256 << 10))
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(path)
    assert path.read_text() == "old: 1\n"
    assert [p.name for p in small_tmpfs.iterdir()] == ["best.yaml"]
