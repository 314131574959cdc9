"""Driver side of the fabric sink: publish a batch's staged frames atomically, or discard them.

The staged files are not read: `Cluster.publish_files` appends their frames as they are (large files become
segments by a rename), under one transaction id, so the batch becomes visible in every partition at once or
not at all, and at most once.
"""
from __future__ import annotations

import os
import shutil
from typing import Sequence

from pyspark.sql.datasource import WriterCommitMessage

from fabric.client.cluster import Cluster
from fabric.common.errors import FabricError
from fabric.sinks.staging import StagedBatch


def _messages(messages: Sequence[WriterCommitMessage | None]) -> list[StagedBatch]:
    """The commit messages of the tasks that returned one (a failed task's is None)."""
    return [m for m in messages if isinstance(m, StagedBatch)]


def checked_messages(txn: str, messages: Sequence[WriterCommitMessage | None]) -> list[StagedBatch]:
    """The tasks' commit messages; FabricError if a task returned none (the batch must not commit)."""
    if any(m is None for m in messages):
        raise FabricError(f"a task of transaction {txn!r} returned no commit message; the batch is not published")
    return _messages(messages)


def publish_staged(cluster: Cluster, txn: str, messages: Sequence[WriterCommitMessage | None]) -> bool:
    """Publish every staged file of a batch under transaction `txn`; False if it was published before."""
    parts: dict[tuple[str, int], list[str]] = {}
    for message in checked_messages(txn, messages):
        for staged in message.files:
            parts.setdefault((staged.topic, staged.partition), []).append(staged.path)
    if not parts:
        return False
    return cluster.publish_files(txn, parts)


def remove_staged(cluster: Cluster, sink_id: str, batch: str | None) -> None:
    """Delete a batch's staging directory (every task attempt's files), or the sink's when batch is None."""
    shutil.rmtree(cluster.staging_dir(sink_id, batch), ignore_errors=True)
    if batch is not None:
        try:
            os.rmdir(cluster.staging_dir(sink_id))
        except OSError:  # other batches' files are still there, or it is gone already
            pass


def sink_ids(messages: Sequence[WriterCommitMessage | None]) -> set[tuple[str, str]]:
    """The (sink id, batch) pairs the tasks staged under (one, unless something is badly wrong)."""
    return {(m.sink_id, m.batch) for m in _messages(messages)}
