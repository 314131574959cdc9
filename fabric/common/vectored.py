"""Writing a list of buffers whole through a gathering call (os.writev to a file, socket.sendmsg to a socket), which
may take fewer bytes than asked: further calls write the rest from the first byte not yet taken, and no buffer is
copied into one first."""
from __future__ import annotations

import os
from typing import Any, Callable, Sequence

IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024  # buffers one call takes at most


def write_all(write: Callable[[Sequence[Any]], int], parts: Sequence[Any]) -> None:
    """Write every byte of `parts` (bytes-like objects, in order) with `write`, which returns how many it took.
    The first call is given `parts` themselves: it most often takes every byte, and then no view is made."""
    whole = len(parts) <= IOV_MAX
    taken = write(parts) if whole else 0
    if whole and taken == sum(map(_size, parts)):
        return
    views = [view for view in (memoryview(part).cast("B") for part in parts) if len(view)]
    _drop(views, taken)
    while views:
        taken = write(views[:IOV_MAX])
        if taken <= 0:
            raise OSError(f"a write took {taken} of {sum(len(v) for v in views)} bytes")
        _drop(views, taken)


def _size(part: Any) -> int:
    return part.nbytes if type(part) is memoryview else len(part)


def _drop(views: list[memoryview], taken: int) -> None:
    """Drop the first `taken` bytes of `views` (a write took them)."""
    while taken > 0:
        if taken >= len(views[0]):
            taken -= len(views.pop(0))
        else:  # part of a buffer: the next call starts within it
            views[0], taken = views[0][taken:], 0
