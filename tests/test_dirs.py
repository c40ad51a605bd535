"""One process at a time in a store's directory (src/efface/dirs.py): the lock, its refusal
while held, and its end when let go; a PostgreSQL store's cache directory locked the same way."""

from __future__ import annotations

import fcntl
import os
import stat

import pytest

import efface
from efface.dirs import fsync_dir, lock_dir


def test_a_held_directory_is_refused_until_it_is_let_go(tmp_path):
    root = os.fspath(tmp_path / "made" / "here")
    held = lock_dir(root, "held: try again later", mode=0o700)
    assert os.path.isdir(root) and stat.S_IMODE(os.stat(root).st_mode) == 0o700
    with pytest.raises(efface.StoreLocked, match="held: try again later"):
        lock_dir(root, "held: try again later")  # a second open file, in this process too
    fcntl.flock(held, fcntl.LOCK_UN)
    held.close()
    again = lock_dir(root, "held: try again later")
    again.close()


def test_a_directory_that_cannot_be_made_is_a_typed_error(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(efface.EffaceError) as got:
        lock_dir(os.fspath(tmp_path / "file" / "below"), "held")
    assert not isinstance(got.value, efface.StoreLocked)
    assert str(tmp_path) not in str(got.value)  # no path in the message


def test_fsync_dir_syncs_a_directory_and_lets_its_descriptor_go(tmp_path):
    (tmp_path / "a.tmp").write_text("x")
    os.replace(tmp_path / "a.tmp", tmp_path / "a")
    open_before = len(os.listdir("/proc/self/fd"))
    fsync_dir(tmp_path)  # a Path
    fsync_dir(os.fspath(tmp_path))  # a str
    assert len(os.listdir("/proc/self/fd")) == open_before
    with pytest.raises(FileNotFoundError):
        fsync_dir(tmp_path / "missing")
