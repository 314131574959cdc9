"""The pending-publish marker: a partition's note that a transaction is writing frames past its watermark.

A JSON object {"txn": id, "base": watermark when the publish began, "end": watermark once it is visible},
written (atomically, by rename) before the frames and removed once the watermark has advanced. Recovery reads
it to decide the fate of the frames past the watermark: rolled forward if the transaction committed, cut
otherwise. A marker that cannot be read names no transaction, so nothing could have committed its frames.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

from fabric.common.errors import CorruptRecordError
from fabric.storage import durable

PENDING = "pending-publish"


class UnreadableMarkerError(CorruptRecordError):
    """A pending-publish marker that is not one (damaged or truncated): recovery removes it and cuts the frames
    past the watermark, which no committed transaction can own."""


@dataclass(frozen=True)
class PendingPublish:
    """A publish in flight (or dead) in one partition: transaction `txn` writes offsets [base, end)."""

    txn: str
    end: int
    base: int | None = None  # None: a marker of an earlier version, which did not record it


def marker_path(directory: str) -> str:
    return os.path.join(directory, PENDING)


def read_marker(directory: str) -> PendingPublish | None:
    """The marker in `directory`, None if there is none (UnreadableMarkerError if it cannot be read)."""
    path = marker_path(directory)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    txn, end, base = (data.get("txn"), data.get("end"), data.get("base")) if isinstance(data, dict) else (None,) * 3
    if not (isinstance(txn, str) and txn and isinstance(end, int) and _offset(end)
            and (base is None or (_offset(base) and base <= end))):
        raise UnreadableMarkerError(f"pending-publish marker {path} is unreadable ({len(raw)} bytes, not a "
                                    f'{{"txn", "base", "end"}} object): it names no transaction')
    return PendingPublish(txn, end, base)


def _offset(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def write_marker(directory: str, marker: PendingPublish) -> None:
    """Write the marker atomically (a reader sees the old one, none, or the whole new one)."""
    path = marker_path(directory)
    durable.replace_file(path, json.dumps({"txn": marker.txn, "base": marker.base, "end": marker.end}).encode(),
                         durably=False)


def remove_marker(directory: str) -> None:
    try:
        os.unlink(marker_path(directory))
    except FileNotFoundError:
        pass
