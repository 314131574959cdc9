"""Topics' metadata as ZooKeeper last told this process, for the reads on every request's path (a commit's range
check, a produce's or a fetch's topic, a group's partition count), so that none of them waits on a ZooKeeper round
trip.

A topic is kept from the read that found it until ZooKeeper says its znode changed or was deleted (the one-shot
data watch that read set), and every topic is forgotten whenever the session's state changes (watches do not
survive a lost session, and a suspended one may miss changes). A read that started before a change was seen is
not kept, and this process's own writes forget the topics they changed at once, so it reads its own writes.
Another process's write reaches this one with its watch: until then a reader may see the topic as it was, as a
Kafka broker's metadata cache does. Topics that do not exist are not kept (each read asks ZooKeeper), so the cache
holds at most the topics there are.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable

from kazoo.client import KazooClient
from kazoo.protocol.states import WatchedEvent

from fabric.common.types import PartitionAssignment, TopicInfo

log = logging.getLogger(__name__)
Entry = tuple[TopicInfo, dict[int, PartitionAssignment]]  # the topic and (a replicated one's) assignment
# (name, watch) -> the topic's entry, read from ZooKeeper with `watch` set on its znode; UnknownTopicError if none
Read = Callable[[str, Callable[[WatchedEvent], None]], Entry]


class ZkTopicCache:
    """The topics read through `read` from `client`'s ZooKeeper, kept as the module says."""

    def __init__(self, client: KazooClient, read: Read) -> None:
        self._client, self._read = client, read
        self._entries: dict[str, Entry] = {}
        self._lock = threading.Lock()
        self._changes = 0  # counts what was forgotten: a read that saw a change meanwhile is not kept
        client.add_listener(self._session_changed)

    def get(self, name: str) -> Entry:
        """The topic `name` as kept, else read from ZooKeeper (and kept); UnknownTopicError if it does not exist."""
        with self._lock:
            entry, changes = self._entries.get(name), self._changes
        if entry is not None:
            return entry
        entry = self._read(name, lambda event: self.forget(name))
        with self._lock:
            if self._changes == changes:
                self._entries[name] = entry
        return entry

    def holds(self, name: str) -> bool:
        """Whether `name` is kept now (get() would ask ZooKeeper nothing)."""
        with self._lock:
            return name in self._entries

    def forget(self, name: str) -> None:
        """Read `name` from ZooKeeper next time (its znode changed, or this process just wrote it)."""
        with self._lock:
            self._entries.pop(name, None)
            self._changes += 1

    def close(self) -> None:
        """Stop hearing the session's state (the client may outlive this cache: an instance's election shares it)."""
        self._client.remove_listener(self._session_changed)

    def _session_changed(self, state: Any) -> None:
        """On kazoo's thread, at any change of the session's state: forget everything (never blocks)."""
        with self._lock:
            self._entries.clear()
            self._changes += 1
        log.debug("ZooKeeper session %s: topic metadata will be read again", state)
