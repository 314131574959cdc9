"""A one-record batch of a plain topic laid out from its shape's template: what a `send().get()` on `file://`
appends, without a record batch built, encoded and freed for it.

The Arrow IPC message of one stored plain record (timestamp, key, no headers, value) is the same bytes for every
record of the same key and value lengths but for the timestamp and the key's and value's bytes: the layout (the
buffers' offsets and lengths, the validity of a null key, the padding) depends on those lengths alone. So the
message of a shape is made once, from a record whose timestamp, key and value are random bytes each found exactly
once in it, and where each lies is kept; a record of that shape is then its copy with its own bytes written
there. A shape where one of them is not found exactly once in any of a few tries (a key or value of a byte may
recur in the metadata) is built the usual way. The log takes the message as it is (batch_encoding.Encoded), as it
takes the offsets topic's commits (coordinator.offsets_records), and the maker vouches for what it would have
checked in a batch: the timestamps (one, the record's), and that the caller checked the key and the size against
the topic.
"""
from __future__ import annotations

import os
import struct
from typing import NamedTuple

import pyarrow as pa

from fabric.common.records import PLAIN_SCHEMA, plain_rows
from fabric.common.types import TopicInfo
from fabric.storage import frame
from fabric.storage.batch_encoding import Encoded

MOST_SHAPES = 1024  # templates kept (a producer of ever new lengths rebuilds them: no unbounded memory)
TRIES = 16  # records of random bytes tried for a shape's template
_STAMP = struct.Struct("<q")


class _Template(NamedTuple):
    """A shape's message and where the record's own bytes go in it (-1: the key is null or empty)."""

    message: bytes
    stamp_at: int
    key_at: int
    value_at: int


_templates: dict[tuple[int, int], _Template | None] = {}


def plain_stored(values: list, keys: list, headers: list, timestamps_ms: list, now_us: int, info: TopicInfo,
                 direct: bool) -> pa.RecordBatch | Encoded:
    """records.plain_rows of a plain topic's records (`info`), or where the log is `direct` (in this process, no
    codec) and the one record fits its template, its message: a record without headers, stamped by its producer
    (CreateTime), within max.message.bytes and, on a compacted topic, with a key (else the log's checks name what
    is wrong, on rows built the usual way)."""
    if direct and len(values) == 1 and not headers[0] and isinstance(values[0], bytes):
        settings, key, value = info.settings, keys[0], values[0]
        if (settings["message.timestamp.type"] == "CreateTime"
                and len(value) + len(key or b"") <= settings["max.message.bytes"]
                and (key is not None or "compact" not in settings["cleanup.policy"])):
            stamp = timestamps_ms[0]
            made = encoded(value, key, now_us if stamp is None else stamp * 1000)
            if made is not None:
                return made
    return plain_rows(values, keys, headers, timestamps_ms, now_us)


def encoded(value: bytes, key: bytes | None, stamp_us: int) -> Encoded | None:
    """The one-record stored rows of a plain topic (no headers) as their message, or None for a shape no template
    holds (built the usual way then)."""
    shape = (-1 if key is None else len(key), len(value))
    try:
        template = _templates[shape]
    except KeyError:  # (a dict another producer's thread may clear meanwhile: read once)
        template = _make(*shape)
        if len(_templates) >= MOST_SHAPES:
            _templates.clear()
        _templates[shape] = template
    if template is None:
        return None
    message = bytearray(template.message)
    _STAMP.pack_into(message, template.stamp_at, stamp_us)
    if template.key_at >= 0 and key:
        message[template.key_at:template.key_at + len(key)] = key
    if value:
        message[template.value_at:template.value_at + len(value)] = value
    return Encoded(pa.py_buffer(message), 1, stamp_us, stamp_us, PLAIN_SCHEMA)


def _make(key_length: int, value_length: int) -> _Template | None:
    """The template of a shape, from a record of random bytes; None where, in each of a few tries, they were not
    each found exactly once (a key or value of a byte or two may recur in the layout in any try)."""
    for _ in range(TRIES):
        stamp = _STAMP.unpack(os.urandom(8))[0] & ((1 << 62) - 1)  # (a timestamp a record may carry)
        key = None if key_length < 0 else os.urandom(key_length)
        value = os.urandom(value_length)
        message = frame.encode_batch(plain_rows([value], [key], [None], [None], stamp)).to_pybytes()
        stamp_at, key_at, value_at = _only(message, _STAMP.pack(stamp)), _only(message, key), _only(message, value)
        if min(stamp_at, key_at, value_at) >= -1:
            return _Template(message, stamp_at, key_at, value_at)
    return None


def _only(message: bytes, part: bytes | None) -> int:
    """Where `part` lies in `message`: -1 for no bytes to place, -2 where it does not lie there exactly once."""
    if not part:
        return -1
    at = message.find(part)
    return at if at >= 0 and message.find(part, at + 1) < 0 else -2
