"""Frames of the fabric protocol: a frame is its length, its header's length, a JSON header and a payload.

    u32 big-endian   N: the bytes after this field (4 + H + payload)
    u32 big-endian   H: the header's bytes (0 <= H <= N - 4)
    H bytes          the header: a UTF-8 JSON object (fabric.common.protocol.messages)
    N - 4 - H bytes  the payload: an Arrow IPC stream (produce, fetch) or nothing

`FrameReader` cuts frames out of the bytes a connection delivers, whatever the size of each delivery, and refuses
a frame longer than its limit (the server's socket.request.max.bytes) or one whose header does not fit in it,
before reading its payload: a refused frame is never handed on, so nothing of it is written. The payload of a
large frame (LARGE_FRAME_BYTES or more: a fetch's answer, a batch's produce) is read into Arrow memory of its own,
allocated once its header has arrived, and handed on as it is: a socket can receive into it (`receive_buffer`),
and bytes fed in are copied there once. An event loop's protocol reads through `read_buffer` and `read_into`
(asyncio.BufferedProtocol): straight into a large frame's payload, other bytes into a buffer of the thread's own
and from there into the reader, with no bytes object made for each read.
"""
from __future__ import annotations

import struct
import threading
from dataclasses import dataclass
from typing import Callable, TypeAlias

import pyarrow as pa

PREFIX = struct.Struct(">II")
MAX_HEADER_BYTES = 2 << 20  # as a Flight request's JSON (a commit of 10,000 partitions takes about 0.5 MiB)
MAX_FRAME_BYTES = (1 << 32) - 1  # what the length field can say
HTTP2_PREFACE = b"PRI * HTTP/2.0"  # how a gRPC client starts: a Flight client at the wrong port
LARGE_FRAME_BYTES = 1 << 16  # a frame this long or longer is read into a buffer of its own
READ_BUFFER_BYTES = 1 << 18  # an event loop's reads outside large payloads (one buffer per thread)
# a frame's payload as it is sent: one buffer, or (an answer) buffers written one after the other, never joined
Payload: TypeAlias = bytes | pa.Buffer | tuple[bytes | pa.Buffer, ...]


class FrameError(Exception):
    """The bytes of a connection are not frames of the fabric protocol (or break a limit); the connection cannot
    go on, since where the next frame starts is unknown. `header` is the refused frame's header when it could be
    read (so the refusal can name the request), else None."""

    def __init__(self, message: str, header: bytes | None = None) -> None:
        super().__init__(message)
        self.header = header


@dataclass(frozen=True)
class Frame:
    """One frame: its JSON header and its payload."""

    header: bytes
    payload: bytes | pa.Buffer

    @property
    def size(self) -> int:
        return PREFIX.size + len(self.header) + len(self.payload)


def encode(header: bytes, payload: Payload | memoryview = b"") -> bytes:
    """A whole frame's bytes."""
    return b"".join(encode_parts(header, payload))


def encode_parts(header: bytes, payload: Payload | memoryview = b"") -> list[bytes | memoryview]:
    """A frame as the buffers to write one after the other (a large payload is not copied: an Arrow buffer is
    written through a view of it, a payload in parts part by part)."""
    parts = [memoryview(p) if isinstance(p, pa.Buffer) else p for p in (payload if isinstance(payload, tuple)
                                                                        else (payload,))]
    return [PREFIX.pack(4 + len(header) + sum(len(p) for p in parts), len(header)), header, *parts]


class _LargeFrame:
    """A large frame under way: its header, and its payload's buffer, filled up to `filled`."""

    def __init__(self, header: bytes, size: int) -> None:
        self.header = header
        self.payload = pa.allocate_buffer(size)  # (not zeroed: the socket writes every byte of it)
        self.view = memoryview(self.payload).cast("B")
        self.filled = 0

    def take(self, data: memoryview) -> int:
        """Copy as much of `data` as the payload still lacks; how many bytes that was."""
        count = min(len(data), len(self.view) - self.filled)
        self.view[self.filled:self.filled + count] = data[:count]
        self.filled += count
        return count


def over_request_limit(total: int, limit: int) -> str:
    """Why a request of `total` bytes is refused by a server whose socket.request.max.bytes is `limit`."""
    return (f"a request of {total} bytes is over socket.request.max.bytes={limit} of this server; nothing of it was "
            "written: send smaller requests (a fabric producer sends batches of at most the topic's "
            "max.message.bytes), or raise socket.request.max.bytes in the server's properties")


class _ReadBuffers(threading.local):
    """Each thread's buffer for an event loop's reads: a loop reads one connection at a time and feeds what it read
    to that connection's reader before its next read, so one buffer serves every connection of the loop."""

    def __init__(self) -> None:
        self.view = memoryview(bytearray(READ_BUFFER_BYTES))


_READS = _ReadBuffers()


class FrameReader:
    """Frames out of a byte stream fed in pieces. `limit`: the longest frame taken (its N plus 4); a longer one
    raises FrameError (`too_long(length, limit)` says why) as soon as its prefix and header have arrived, or its
    prefix alone if the header would not fit in the limit either: no more than `limit` bytes of a frame are ever
    held. A frame of `large` bytes or more gets a payload buffer of its own (a pyarrow.Buffer, where a smaller
    frame's payload is bytes)."""

    def __init__(self, limit: int = MAX_FRAME_BYTES, large: int = LARGE_FRAME_BYTES,
                 too_long: Callable[[int, int], str] = over_request_limit) -> None:
        self.limit, self.large, self.too_long = limit, large, too_long
        self._buffer = bytearray()
        self._start = 0
        self._large: _LargeFrame | None = None

    @property
    def pending(self) -> int:
        """Bytes received that are not yet part of a whole frame (a frame cut short by a closed connection)."""
        large = self._large
        return len(self._buffer) - self._start + (0 if large is None else PREFIX.size + len(large.header)
                                                   + large.filled)

    def receive_buffer(self) -> memoryview | None:
        """Where the next bytes go while a large frame's payload is under way (for a socket's recv_into: no copy;
        then `received`); None when they are to be fed in."""
        large = self._receiving()
        return None if large is None else large.view[large.filled:]

    def _receiving(self) -> _LargeFrame | None:
        """The large frame whose payload the next bytes go into, if one is under way and not yet filled."""
        large = self._large
        return None if large is None or large.filled == len(large.view) else large

    def received(self, count: int) -> None:
        """`count` bytes arrived in receive_buffer()."""
        assert self._large is not None
        self._large.filled += count

    def read_buffer(self) -> memoryview:
        """Where an event loop reads next (BufferedProtocol.get_buffer): the rest of a large frame's payload, else
        the thread's read buffer; then `read_into`."""
        view = self.receive_buffer()
        return _READS.view if view is None else view

    def read_into(self, count: int) -> None:
        """`count` bytes were read where read_buffer said (BufferedProtocol.buffer_updated: nothing in between
        changes where that was)."""
        if self._receiving() is not None:
            self.received(count)
        else:
            self.feed(_READS.view[:count])

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self._large is not None:
            view = memoryview(data)
            taken = self._large.take(view)
            if taken == len(view):
                return
            data = view[taken:]  # the frames after the large one
        if self._start and self._start == len(self._buffer):
            self._buffer.clear()
            self._start = 0
        self._buffer += data

    def next(self) -> Frame | None:
        """The next whole frame, or None until more bytes arrive; FrameError if the stream breaks the format."""
        large = self._large
        if large is not None:
            if large.filled < len(large.view):
                return None
            self._large = None
            return Frame(large.header, large.payload)
        buffer, start = self._buffer, self._start
        available = len(buffer) - start
        if available < PREFIX.size:
            return None
        if buffer.startswith(HTTP2_PREFACE, start):
            raise FrameError("a gRPC (Arrow Flight) client connected to the fabric protocol port: point it at the "
                             "server's Flight port (its address in the fabric:// URL or the node registration)")
        length, header_length = PREFIX.unpack_from(buffer, start)
        if length < 4 or header_length > length - 4:
            raise FrameError(f"a frame of {length} bytes cannot hold a header of {header_length} bytes: the "
                             "connection does not speak the fabric protocol (docs/protocol.md)")
        if header_length > MAX_HEADER_BYTES:
            raise FrameError(f"a frame's header is {header_length} bytes, over the limit of {MAX_HEADER_BYTES}; "
                             "split the request (e.g. commit fewer partitions at once)")
        total = 4 + length
        header_end = start + PREFIX.size + header_length
        if total > self.limit:  # refused once its header is here, to name the request (if the limit holds that)
            named = PREFIX.size + header_length <= self.limit
            if named and len(buffer) < header_end:
                return None
            raise FrameError(self.too_long(total, self.limit),
                             bytes(buffer[start + PREFIX.size:header_end]) if named else None)
        if available < total:
            if total >= self.large and len(buffer) >= header_end:
                self._open_large(start, header_end, start + total)
            return None
        with memoryview(buffer) as view:  # one copy of each part (a bytearray slice would be a second)
            frame = Frame(bytes(view[start + PREFIX.size:header_end]), bytes(view[header_end:start + total]))
        self._start = start + total
        if self._start > 1 << 16 and self._start * 2 > len(buffer):  # drop what was read, now and then
            del buffer[:self._start]
            self._start = 0
        return frame

    def _open_large(self, start: int, header_end: int, end: int) -> None:
        """Move the large frame at `start` (header up to `header_end`, whole at `end`) to a buffer of its own, with
        what has arrived of its payload: all that was received, since the frame is not whole yet."""
        with memoryview(self._buffer) as view:
            self._large = _LargeFrame(bytes(view[start + PREFIX.size:header_end]), end - header_end)
            self._large.take(view[header_end:])
        self._buffer.clear()
        self._start = 0

    def frames(self) -> list[Frame]:
        """Every whole frame received so far."""
        out = []
        while (frame := self.next()) is not None:
            out.append(frame)
        return out
