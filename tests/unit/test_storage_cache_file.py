"""A partition's cache files (fabric/storage/cache_file.py): a write that fails part-way (a full disk) leaves the
file there before as it was and nothing of its own behind."""
from __future__ import annotations

import builtins
import errno
import os

from fabric.storage import cache_file


def test_a_write_that_fails_part_way_leaves_the_earlier_file_and_no_partial_copy(tmp_path, monkeypatch) -> None:
    path = str(tmp_path / "producer-state.snapshot")
    cache_file.write(path, b"earlier state")

    class FullDisk:
        """A file that takes a few bytes, then refuses the rest as a full disk does."""

        def __init__(self, *args, **kwargs) -> None:
            self.file = builtins.open(*args, **kwargs)

        def __enter__(self) -> FullDisk:
            return self

        def __exit__(self, *exc) -> None:
            self.file.close()

        def write(self, data: bytes) -> int:
            self.file.write(data[:5])
            self.file.flush()
            raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(cache_file, "open", FullDisk, raising=False)
    cache_file.write(path, b"a longer, later state")  # left out, quietly
    monkeypatch.undo()

    assert sorted(os.listdir(tmp_path)) == ["producer-state.snapshot"]
    assert cache_file.read(path) == b"earlier state"
