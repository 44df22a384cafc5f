"""A file the tool writes whole or not at all: on a full disk the old file stands, no temporary file
is left, and the error names the file (the command's one line prints it)."""

from __future__ import annotations

import errno
import os
import stat

import pytest

from autotune.config.io import write_output, write_text_atomic
from autotune.errors import ConfigError
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


def test_a_new_file_takes_the_umask_and_a_replaced_one_keeps_its_mode(tmp_path):
    """Written through mkstemp, every report, best.yaml and modality.json was 0600: unreadable by
    the others who share the run folder or the dataset."""
    mask = os.umask(0o027)
    try:
        write_text_atomic(tmp_path / "report.html", "<html/>")
    finally:
        os.umask(mask)
    assert stat.S_IMODE((tmp_path / "report.html").stat().st_mode) == 0o640
    kept = tmp_path / "modality.json"
    kept.write_text("{}")
    kept.chmod(0o664)
    write_text_atomic(kept, '{"state": {}}')
    assert stat.S_IMODE(kept.stat().st_mode) == 0o664 and kept.read_text() == '{"state": {}}'


def _device(path):
    if os.geteuid() != 0:
        pytest.skip("making a device node needs root")
    os.mknod(path, stat.S_IFCHR | 0o644, os.makedev(1, 3))  # what /dev/null is


@pytest.mark.parametrize("make", [os.mkfifo, _device], ids=["fifo", "device"])
@pytest.mark.parametrize("through_link", [False, True], ids=["direct", "link"])
def test_a_device_or_pipe_is_never_replaced(tmp_path, make, through_link):
    """`report --out /dev/null` run as root replaced /dev/null itself with the page."""
    special = tmp_path / "special"
    make(special)
    path = special
    if through_link:  # /dev/stdout is a link
        path = tmp_path / "link"
        path.symlink_to(special)
    with pytest.raises(ConfigError) as caught:
        write_output(path, "<html/>")
    assert str(caught.value) == (
        f"--out {path}: cannot write the file (a device, pipe or socket is there, not a file; it "
        "is never replaced); give a place you can write"
    )
    assert not stat.S_ISREG(special.lstat().st_mode) and path.is_symlink() == through_link
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({"special", path.name})
