"""The cleaner checkpoint of one partition: how far the log cleaner has compacted it, and when.

Kafka keeps one number per partition, the first dirty offset. Ours keeps the passes still needed to time
tombstones: (end offset, time) for each cleaning pass, oldest first, so a tombstone at offset o was first
cleaned by the first pass whose end is past o, and is removed once delete.retention.ms has passed since then
(Kafka's delete horizon). Passes older than that horizon are merged into one, so the list stays short.

The file (`cleaner-checkpoint` in the partition directory) is JSON, replaced atomically. One that is missing or
cannot be read means "never cleaned": every closed segment counts as dirty and no tombstone is old enough yet,
which is safe (compaction only waits longer).
"""
from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass

from fabric.storage import durable

log = logging.getLogger(__name__)

CHECKPOINT = "cleaner-checkpoint"


@dataclass(frozen=True)
class CleanerCheckpoint:
    """The passes of the cleaner over one partition: (end offset, time in ms), both increasing."""

    passes: tuple[tuple[int, int], ...] = ()

    @property
    def first_dirty(self) -> int:
        """The first offset no pass has cleaned (0 if none has run)."""
        return self.passes[-1][0] if self.passes else 0

    def cleaned_at(self, offset: int) -> int | None:
        """When the pass that first cleaned `offset` ran (None: not cleaned yet)."""
        for end, at in self.passes:
            if offset < end:
                return at
        return None

    def after_pass(self, end_offset: int, now_ms: int, horizon_ms: int) -> CleanerCheckpoint:
        """This checkpoint with a pass that cleaned up to `end_offset` at `now_ms`; passes older than
        `horizon_ms` (delete.retention.ms) ago are merged into the newest of them, whose time tells every offset
        they cover that it is old enough."""
        passes = [p for p in self.passes if p[0] <= end_offset]
        if not passes or passes[-1][0] < end_offset:
            passes.append((end_offset, now_ms))
        old = [p for p in passes if now_ms - p[1] >= horizon_ms]
        if len(old) > 1:
            passes = [old[-1]] + [p for p in passes if p not in old]
        return CleanerCheckpoint(tuple(passes))

    # -- the file ------------------------------------------------------------------------------------
    @classmethod
    def read(cls, directory: str) -> CleanerCheckpoint:
        """The checkpoint in `directory` (empty if missing; empty, logged at WARNING, if unreadable)."""
        path = os.path.join(directory, CHECKPOINT)
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            passes = tuple((int(end), int(at)) for end, at in data["passes"])
        except FileNotFoundError:
            return cls()
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("cleaner checkpoint %s cannot be read (%s): the partition is treated as never cleaned",
                        path, exc)
            return cls()
        if any(b[0] <= a[0] for a, b in zip(passes, passes[1:], strict=False)):
            log.warning("cleaner checkpoint %s does not increase: the partition is treated as never cleaned", path)
            return cls()
        return cls(passes)

    def write(self, directory: str) -> None:
        """Replace the file atomically and durably (fabric.storage.durable)."""
        data = json.dumps({"version": 1, "passes": [list(p) for p in self.passes]})
        durable.replace_file(os.path.join(directory, CHECKPOINT), data.encode("utf-8"))
