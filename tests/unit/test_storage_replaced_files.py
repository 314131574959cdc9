"""The small files replaced whole (fabric/storage/durable.py): a write that fails part-way (a full disk) leaves the
file there before as it was and nothing of its own behind, whichever writer it is."""
from __future__ import annotations

import builtins
import errno
import os
from typing import Callable

import pytest

from fabric.server.node import directory_ids
from fabric.storage import cache_file, durable, log_start, marker
from fabric.storage.index import OffsetIndex


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


def _cache_file(directory: str) -> tuple[Callable[[int], None], Callable[[], object]]:
    path = os.path.join(directory, "producer-state.snapshot")
    return (lambda n: cache_file.write(path, b"state %d" % n)), (lambda: cache_file.read(path))


def _log_start(directory: str) -> tuple[Callable[[int], None], Callable[[], object]]:
    return (lambda n: log_start.write(directory, n)), (lambda: log_start.read(directory))


def _marker(directory: str) -> tuple[Callable[[int], None], Callable[[], object]]:
    return (lambda n: marker.write_marker(directory, marker.PendingPublish(f"txn-{n}", 10 * n + 9, 10 * n))), \
        (lambda: marker.read_marker(directory))


def _index(directory: str) -> tuple[Callable[[int], None], Callable[[], object]]:
    path = os.path.join(directory, "00000000000000000000.index")
    return (lambda n: OffsetIndex(path).reset([(n, 4096 * n), (n + 1, 4096 * n + 100)])), \
        (lambda: list(OffsetIndex(path).entries.tolist()))


def _topic_id(directory: str) -> tuple[Callable[[int], None], Callable[[], object]]:
    return (lambda n: directory_ids.write_topic_id(directory, f"topic-id-{n}")), \
        (lambda: directory_ids.stored_topic_id(directory))


WRITERS = {"cache file": _cache_file, "log start checkpoint": _log_start, "pending-publish marker": _marker,
           "rebuilt index": _index, "topic id": _topic_id}


@pytest.mark.parametrize("writer", WRITERS)
def test_a_write_that_fails_part_way_leaves_the_earlier_file_and_no_partial_copy(tmp_path, monkeypatch,
                                                                                 writer: str) -> None:
    write, read = WRITERS[writer](str(tmp_path))
    write(1)
    earlier, names = read(), sorted(os.listdir(tmp_path))
    assert earlier is not None

    monkeypatch.setattr(durable, "open", FullDisk, raising=False)
    if writer == "cache file":
        write(2)  # a cache is left out, quietly
    else:
        with pytest.raises(OSError) as refused:
            write(2)
        assert refused.value.errno == errno.ENOSPC
    monkeypatch.undo()

    assert sorted(os.listdir(tmp_path)) == names  # no `.tmp` left holding the space
    assert read() == earlier
    write(3)  # the disk has room again: written as usual
    assert read() != earlier
