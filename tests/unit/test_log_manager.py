"""A data directory's partition logs (fabric/storage/log_manager.py): a partition keeps its Log object, its tail
and its waiters across a change of its topic's configs or partition count, and gets a new one for a topic deleted
and created again (another topic id) or of another storage schema."""
from __future__ import annotations

import pyarrow as pa

from fabric.common.types import TopicInfo
from fabric.storage.log_manager import LogManager


def test_a_config_change_keeps_the_partitions_log_and_its_tail(tmp_path, storage) -> None:
    logs = LogManager(str(tmp_path), lambda txn: False)
    plog = logs.log(TopicInfo("t", 1, {"retention.ms": "1000"}, topic_id="id-1"), 0)
    plog.append(storage.make_batch([b"a"]))
    recovered = plog.last_recovery
    changed = logs.log(TopicInfo("t", 2, {"retention.ms": "2000"}, topic_id="id-1"), 0)
    assert changed is plog and plog.config["retention.ms"] == 2000
    assert plog.append(storage.make_batch([b"b"])) == 1
    assert plog.last_recovery is recovered  # the tail it knew still holds: nothing was recovered again
    assert logs.log(TopicInfo("t", 2, {}, topic_id="id-2"), 0) is not plog  # deleted and created again
    typed = TopicInfo("t", 2, {}, pa.schema([("n", pa.int64())]), topic_id="id-2")
    assert logs.log(typed, 0) is not logs.log(TopicInfo("t", 2, {}, topic_id="id-2"), 0)
