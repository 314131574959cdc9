"""The LogManager: every partition log of one data directory, as Kafka's LogManager owns a broker's logs.

Layout: <root>/<topic>/<partition>/ holds a partition's segments; <root>/__fabric/ holds what is not a
partition (the embedded metadata database, the Spark sink's staging area). Topic names are validated, so a
topic directory can never leave the root.
"""
from __future__ import annotations

import logging
import os
import shutil
import threading
from typing import Callable

from fabric.common.errors import FabricError, UnknownPartitionError
from fabric.common.names import validate_topic
from fabric.common.types import TopicInfo, TopicPartition
from fabric.storage.log import Log
from fabric.storage.recent_frames import RECENT_BYTES

log = logging.getLogger(__name__)

INTERNAL_DIR = "__fabric"


class LogManager:
    """The logs under `root`, opened on demand and cached per (topic, partition) while the topic is the same (its id
    and storage schema; a change of its configs goes into the cached log). `transaction_committed` decides whether
    a dead publish's frames are rolled forward; `replica` opens every log in replica mode (a data node's, see Log),
    keeping the frames each wrote last in memory: the node's process alone writes its directory."""

    def __init__(self, root: str, transaction_committed: Callable[[str], bool], replica: bool = False) -> None:
        self.root = os.path.abspath(root)
        self.internal_dir = os.path.join(self.root, INTERNAL_DIR)
        os.makedirs(self.internal_dir, exist_ok=True)
        self._transaction_committed = transaction_committed
        self.replica = replica
        self._logs: dict[TopicPartition, tuple[TopicInfo, Log]] = {}
        self._guard = threading.Lock()

    def topic_dir(self, topic: str) -> str:
        """The topic's directory; the validated name cannot leave the root."""
        path = os.path.join(self.root, validate_topic(topic))
        assert os.path.dirname(path) == self.root
        return path

    def log(self, info: TopicInfo, partition: int, create: bool = True) -> Log:
        """The Log of one partition of the topic `info` describes (reloaded if the metadata changed); without
        `create`, FileNotFoundError if it has no directory (see Log)."""
        if type(partition) is int:
            cached = self._logs.get((info.name, partition))
            if cached is not None and cached[0] is info:  # (the metadata object it was opened with: checked then)
                return cached[1]
        if not isinstance(partition, int) or isinstance(partition, bool) or not 0 <= partition < info.partitions:
            raise UnknownPartitionError(f"topic {info.name!r} has partitions 0..{info.partitions - 1}; "
                                        f"there is no partition {partition!r}")
        with self._guard:
            cached = self._logs.get((info.name, partition))
            if cached is not None and cached[0] == info:
                self._logs[(info.name, partition)] = (info, cached[1])  # the same metadata, read again
                return cached[1]
            if cached is not None and _same_log(cached[0], info):  # configs or the partition count changed: the
                cached[1].config = info.settings  # log takes the configs (each use reads them) and keeps
                self._logs[(info.name, partition)] = (info, cached[1])  # its tail, its kept frames, its waiters
                return cached[1]
            log = Log(os.path.join(self.topic_dir(info.name), str(partition)), info.stored_schema,
                      info.settings, self._transaction_committed, replica=self.replica,
                      recent_bytes=RECENT_BYTES if self.replica else 0, create=create)
            self._logs[(info.name, partition)] = (info, log)
            return log

    def closing(self) -> None:
        """As the process closes the logs this object opened: what spares their next opening a walk of their
        frames (Log.closing); a log that cannot be written is left out, logged."""
        with self._guard:
            logs = [plog for _, plog in self._logs.values()]
        for plog in logs:
            try:
                plog.closing()
            except (FabricError, OSError) as exc:
                if not os.path.isdir(plog.directory):  # its partition was deleted meanwhile: nothing is left to keep
                    log.debug("%s: deleted before it was closed (%s)", plog.name, exc)
                    continue
                log.warning("%s: closed without its producer state snapshot or clean end: %s", plog.name, exc)

    def create_partitions(self, info: TopicInfo, first: int = 0) -> None:
        """Create (or recover) the logs of partitions first..info.partitions-1 on disk."""
        for p in range(first, info.partitions):
            self.log(info, p).sync_tail_locked()

    def partitions_on_disk(self) -> list[TopicPartition]:
        """Every partition with a directory under the root, sorted."""
        found = []
        for topic in os.listdir(self.root):
            directory = os.path.join(self.root, topic)
            if topic != INTERNAL_DIR and os.path.isdir(directory):
                found += [(topic, int(p)) for p in os.listdir(directory)
                          if p.isdigit() and os.path.isdir(os.path.join(directory, p))]
        return sorted(found)

    def delete_partition(self, tp: TopicPartition) -> None:
        """Forget one partition's log and remove its directory (a replica moved to other nodes)."""
        directory = os.path.join(self.topic_dir(tp[0]), str(tp[1]))
        with self._guard:
            self._logs.pop(tp, None)
        shutil.rmtree(directory, ignore_errors=True)

    def delete_topic(self, topic: str) -> None:
        """Forget the topic's logs and remove its directory (whatever is in it)."""
        directory = self.topic_dir(topic)
        with self._guard:
            for key in [k for k in self._logs if k[0] == topic]:
                del self._logs[key]
        shutil.rmtree(directory, ignore_errors=True)


def _same_log(old: TopicInfo, new: TopicInfo) -> bool:
    """Whether a partition log opened with `old` serves `new` as it is: the same topic (its id) and storage
    schema, whatever its configs and partition count."""
    same_schema = old.value_schema is new.value_schema or (
        old.value_schema is not None and new.value_schema is not None and old.value_schema.equals(new.value_schema))
    return old.topic_id == new.topic_id and same_schema
