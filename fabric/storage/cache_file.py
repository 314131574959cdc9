"""Small files a partition keeps beside its segments as caches of what its frames say (a segment's transaction
index, the producer state snapshot, a replica log's clean end): each is its body and a CRC32 of it, replaced whole
(written to `<path>.tmp`, renamed over it), never fsynced, and trusted only whole. One that cannot be written (a
read-only or full disk) is left out, and one missing or damaged is read as none: the frames are walked instead."""
from __future__ import annotations

import logging
import struct
import zlib

from fabric.storage import durable

log = logging.getLogger(__name__)

_CRC = struct.Struct("<I")


def write(path: str, body: bytes) -> None:
    """Replace the file at `path` with `body` and its CRC; left out (logged at DEBUG) where it cannot be written,
    what was written of it removed (a full disk gets its space back; the file there before stays as it was)."""
    try:
        durable.replace_file(path, body + _CRC.pack(zlib.crc32(body)), durably=False)
    except OSError as exc:
        log.debug("%s is left out: %s", path, exc)


def read(path: str) -> bytes | None:
    """The body of the file at `path`; None if there is none, or it is not whole (its CRC fails)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if len(data) < _CRC.size or zlib.crc32(data[:-_CRC.size]) != _CRC.unpack_from(data, len(data) - _CRC.size)[0]:
        return None
    return data[:-_CRC.size]
