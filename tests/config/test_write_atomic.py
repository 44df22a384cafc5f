"""A file the tool writes whole or not at all: on a full disk the old file stands, no temporary file
is left, and the error names the file (the command's one line prints it)."""

from __future__ import annotations

import errno

import pytest

from autotune.config.io import write_text_atomic
from tests.tmpfs import small_disk


def test_a_full_disk_keeps_the_old_file_and_names_the_new_one(tmp_path):
    with small_disk(tmp_path / "disk", "64k") as disk:
        path = disk / "best.yaml"
        path.write_text("old: 1\n")
        with pytest.raises(OSError) as caught:
            write_text_atomic(path, "x" * (256 << 10))
        assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(path)
        assert path.read_text() == "old: 1\n"
        assert [p.name for p in disk.iterdir()] == ["best.yaml"]
