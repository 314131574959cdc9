"""A transaction's publish: sealed frames written to several partitions become visible in all of them at once,
and at most once per transaction id.

The partitions are locked in sorted order; each gets a pending-publish marker naming the transaction and the
frames are written past its high watermark (the partitions in parallel threads: copies and CRCs release the
GIL); the transaction is committed in the coordinator (the commit point); then the watermarks advance. A crash
before the commit leaves frames the next writer truncates, one after it frames the next writer rolls forward.
"""
from __future__ import annotations

import contextlib
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Mapping

import pyarrow as pa

from fabric.common.types import TopicPartition
from fabric.coordinator.interface import Coordinator
from fabric.storage.frame import FrameHeader
from fabric.storage.log import Log

log = logging.getLogger(__name__)
DEBUG_PAUSE_ENV = "FABRIC_DEBUG_PUBLISH_PAUSE_S"
Frame = tuple[FrameHeader, pa.Buffer]
Staged = list[tuple[str | None, list[Frame]]]  # per partition: (a staged file to adopt, or None to copy; its frames)


def publish(coordinator: Coordinator, log_of: Callable[[str, int], Log], partitions_of: Callable[[str], int],
            txn: str, staged: Mapping[TopicPartition, Staged],
            validate: Callable[[], None] = lambda: None) -> dict[TopicPartition, int] | None:
    """Publish `staged` under transaction `txn`: each partition's base offset (where its first record landed),
    or None (nothing written) if `txn` had already committed. `validate()` runs once every partition is locked,
    before anything is written: what it raises refuses the publish (a transaction's offset commit is checked
    there, so no commit of the same group partition slips in between)."""
    if coordinator.transaction_committed(txn):
        log.info("transaction %s committed before: skipped (a replay)", txn)
        return None
    keys = sorted(staged)
    _recover_dead_attempts(log_of, partitions_of, txn, keys)
    logs = {key: log_of(*key) for key in keys}
    with contextlib.ExitStack() as stack:
        for key in keys:
            stack.enter_context(logs[key].lock)
        if coordinator.transaction_committed(txn):
            return None
        validate()
        ends, bases = {}, {}
        for key in keys:
            logs[key].sync_tail()  # here, not in the threads: recovery may take the lock again
            bases[key] = logs[key].end_offset
            ends[key] = bases[key] + sum(h.record_count for _, frames in staged[key] for h, _ in frames)
            logs[key].begin_publish(txn, ends[key])
        try:
            with ThreadPoolExecutor(max(1, min(len(keys), os.cpu_count() or 1))) as pool:
                for done in [pool.submit(_write_staged, logs[k], bases[k], staged[k]) for k in keys]:
                    done.result()
        except BaseException:
            for partition_log in logs.values():
                partition_log.forget_tail()  # the next writer truncates what this publish wrote
            raise
        _debug_pause(0)
        coordinator.commit_transaction(txn)
        _debug_pause(1)
        for key in keys:
            logs[key].finish_publish(ends[key])
    log.debug("transaction %s published to %d partition(s)", txn, len(keys))
    return bases


def _recover_dead_attempts(log_of: Callable[[str, int], Log], partitions_of: Callable[[str], int], txn: str,
                           keys: list[TopicPartition]) -> None:
    """Recover the other partitions of these topics whose pending-publish marker names `txn`, while it is
    uncommitted. An earlier attempt of this publish died there; a replay of a Spark batch places null-key
    records on sticky partitions chosen anew, so it may not write those partitions. Recovered now, the dead
    frames are truncated; after the commit they would be rolled forward as if this attempt wrote them.
    Done before taking this publish's locks, which are taken in sorted order and never beside others."""
    for topic in sorted({t for t, _ in keys}):
        for p in range(partitions_of(topic)):
            partition_log = log_of(topic, p)
            marker = partition_log.pending()
            if (topic, p) not in keys and marker is not None and marker.txn == txn:
                log.warning("%s-%d: truncating what a dead attempt of transaction %s wrote", topic, p, txn)
                partition_log.sync_tail_locked()


def _write_staged(log: Log, base: int, items: Staged) -> None:
    """Write one partition's part of a publish at `base`: adopt the large staged files, copy the rest."""
    for path, frames in items:
        count = sum(h.record_count for h, _ in frames)
        if not count or (path is not None and log.adopt_segment(path, frames, base)):
            base += count
            continue
        for header, payload in frames:
            if header.record_count:
                log.write_frame(header.rebased(base), payload)
                base += header.record_count


def _debug_pause(stage: int) -> None:
    """Sleep $FABRIC_DEBUG_PUBLISH_PAUSE_S seconds inside publish, before the commit point (stage 0) and after it
    (stage 1): crash tests widen the kill window. "S" pauses at both, "S0,S1" at each its own time."""
    pauses = (os.environ.get(DEBUG_PAUSE_ENV) or "0").split(",")
    pause = float(pauses[min(stage, len(pauses) - 1)] or 0)
    if pause > 0:
        time.sleep(pause)
