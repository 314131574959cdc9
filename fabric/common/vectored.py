"""Writing a list of buffers whole through a gathering call (os.writev to a file, socket.sendmsg to a socket), which
may take fewer bytes than asked: further calls write the rest from the first byte not yet taken, and no buffer is
copied into one first."""
from __future__ import annotations

import os
from typing import Any, Callable, Sequence

IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024  # buffers one call takes at most


def write_all(write: Callable[[list[memoryview]], int], parts: Sequence[Any]) -> None:
    """Write every byte of `parts` (bytes-like objects, in order) with `write`, which returns how many it took."""
    views = [view for view in (memoryview(part).cast("B") for part in parts) if len(view)]
    while views:
        taken = write(views[:IOV_MAX])
        if taken <= 0:
            raise OSError(f"a write took {taken} of {sum(len(v) for v in views)} bytes")
        while taken:
            if taken >= len(views[0]):
                taken -= len(views.pop(0))
            else:  # part of a buffer: the next call starts within it
                views[0], taken = views[0][taken:], 0
