"""The high watermark: the end of the committed log. Readers never read past it.

A 16-byte file, written only under the partition lock: magic b"FHW" and format version 1 (4 bytes), the value
(i64), and a CRC32C of the first 12 bytes (u32), all little-endian. Appends write their frames first and
advance the watermark last, so a frame below the watermark is whole and was acknowledged. The checksum tells
a damaged file from a valid one; the 8-byte files of earlier versions (the bare value) are still read, but,
lacking one, are checked against the frames by recovery. The file is read and written with pread/pwrite; only an
embedded log's appends keep it open between them (open_files, a few partitions per process), so open files do not
grow with the partitions a process serves.
"""
from __future__ import annotations

import enum
import os
import struct
from dataclasses import dataclass
from typing import Callable

import crc32c

from fabric.storage.open_files import DIRECT, DirectFiles

MAGIC = b"FHW\x01"
_BODY = struct.Struct("<4sq")
_FORMAT = struct.Struct("<4sqI")
SIZE = _FORMAT.size
LEGACY_SIZE = 8
_TORN_READ_RETRIES = 3  # a read racing a pwrite may see half of it; the checksum tells, a re-read settles it


class WatermarkState(str, enum.Enum):
    """What the watermark file held when read."""

    VALID = "valid"
    MISSING = "missing"
    SHORT = "short"  # shorter than a watermark (e.g. emptied by a crash or a full disk)
    CORRUPT = "corrupt"  # wrong size, magic or checksum
    NEGATIVE = "negative"
    LEGACY = "legacy"  # the 8-byte format of earlier versions: a value without a checksum

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class WatermarkReading:
    """One read of the file: `value` is set for VALID and LEGACY readings (LEGACY ones are unverified)."""

    state: WatermarkState
    value: int | None = None
    raw: bytes = b""

    @property
    def trusted(self) -> bool:
        return self.state is WatermarkState.VALID


def encode(value: int) -> bytes:
    body = _BODY.pack(MAGIC, value)
    return body + struct.pack("<I", crc32c.crc32c(body))


def decode(raw: bytes) -> WatermarkReading:
    """Classify the bytes of a watermark file."""
    if len(raw) == LEGACY_SIZE:
        value = struct.unpack("<q", raw)[0]
        return WatermarkReading(WatermarkState.NEGATIVE if value < 0 else WatermarkState.LEGACY, value, raw)
    if len(raw) < SIZE:
        return WatermarkReading(WatermarkState.SHORT, None, raw)
    magic, value, crc = _FORMAT.unpack_from(raw)
    if len(raw) != SIZE or magic != MAGIC or crc != crc32c.crc32c(raw[:_BODY.size]):
        return WatermarkReading(WatermarkState.CORRUPT, None, raw)
    return WatermarkReading(WatermarkState.NEGATIVE if value < 0 else WatermarkState.VALID, value, raw)


class HighWatermark:
    """The watermark file of one partition: `read()` classifies it, `write()` replaces it (lock held)."""

    def __init__(self, path: str, exact: Callable[[], bool] = lambda: False) -> None:
        self.path = path
        self._exact = exact  # asked at each write: True if the file is known to hold exactly a watermark

    def read(self) -> WatermarkReading:
        reading = WatermarkReading(WatermarkState.MISSING)
        for _ in range(_TORN_READ_RETRIES):
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                return WatermarkReading(WatermarkState.MISSING)
            try:
                raw = os.pread(fd, SIZE + 1, 0)
            except OSError as exc:  # (a directory opens, then fails to read: named, as an open's error is)
                raise OSError(exc.errno, exc.strerror, self.path) from None
            finally:
                os.close(fd)
            reading = decode(raw)
            if reading.state not in (WatermarkState.CORRUPT, WatermarkState.SHORT):
                return reading
        return reading

    def write(self, value: int, files: DirectFiles = DIRECT) -> None:
        """Publish a new end (caller holds the partition lock): one 16-byte write at byte 0, the file then cut to
        16 bytes if it was longer (its size not looked at while the owner knows it is exact), opened through
        `files` (open_files)."""
        if value < 0:
            raise ValueError(f"a high watermark is never negative, got {value}")
        data = encode(value)
        fd = files.open(self.path, os.O_WRONLY | os.O_CREAT)
        try:
            if os.pwrite(fd, data, 0) != SIZE:
                raise OSError(f"short write of the high watermark {self.path}")
            if not self._exact() and os.fstat(fd).st_size != SIZE:
                os.ftruncate(fd, SIZE)  # a longer damaged file: drop its tail
        finally:
            files.done(fd)

    def fsync(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)
