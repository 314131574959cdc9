"""Znodes' contents as ZooKeeper last told this process, for the reads on every request's path, so that none of
them waits on a ZooKeeper round trip: a topic's metadata (a commit's range check, a produce's or a fetch's topic,
a group's partition count) and a group's state (a commit's generation check).

A value is kept from the read that found it until ZooKeeper says its znode changed, was created or was deleted
(the one-shot watch that read set), and every value is forgotten whenever the session's state changes (watches do
not survive a lost session, and a suspended one may miss changes). A read that started before a change was seen is
not kept, and this process's own writes forget what they changed at once, so it reads its own writes. Another
process's write reaches this one with its watch: until then a reader may see the znode as it was, as a Kafka
broker's metadata cache does. What a cache may keep of absent znodes is up to its `read` (a topic that does not
exist raises, and is not kept; a group with no state is kept as such); past `limit` keys it starts afresh.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Generic, TypeVar

from kazoo.client import KazooClient
from kazoo.protocol.states import WatchedEvent

log = logging.getLogger(__name__)
V = TypeVar("V")
Watch = Callable[[WatchedEvent], None]
MAX_KEPT = 100_000  # keys a cache keeps at most (then it starts afresh)


class ZkWatchedCache(Generic[V]):
    """Values read through `read(key, watch)` (get), or in bulk through the `read_many` a caller gives (get_many),
    from `client`'s ZooKeeper (`watch` set on every znode the value came from, whose path `key_of` maps back to its
    key), kept as the module says; `what` names them in logs."""

    def __init__(self, client: KazooClient, read: Callable[[str, Watch], V] | None, key_of: Callable[[str], str],
                 what: str, limit: int = MAX_KEPT) -> None:
        self._client, self._read, self._key_of, self._what, self._limit = client, read, key_of, what, limit
        self._entries: dict[str, V] = {}
        self._lock = threading.Lock()
        self._changes = 0  # counts what was forgotten: a read that saw a change meanwhile is not kept
        client.add_listener(self._session_changed)

    def get(self, key: str) -> V:
        """The value of `key` as kept, else read from ZooKeeper (and kept); what `read` raises otherwise."""
        with self._lock:
            entry, changes = self._entries.get(key), self._changes
        if entry is not None:
            return entry
        assert self._read is not None, f"{self._what} are read in bulk (get_many)"
        entry = self._read(key, self._changed)  # one bound method: kazoo keeps a set of a znode's watchers
        with self._lock:
            if self._changes == changes:
                if len(self._entries) >= self._limit:
                    self._entries.clear()
                self._entries[key] = entry
        return entry

    def get_many(self, keys: list[str], read_many: Callable[[list[str], Watch], dict[str, V]]) -> dict[str, V]:
        """The values of `keys` as kept, those not kept read at once with `read_many(missing, watch)` (all in
        flight together; a key it leaves out, such as an absent znode, is left out of the answer and not kept)."""
        with self._lock:
            found, changes = {k: self._entries[k] for k in keys if k in self._entries}, self._changes
        missing = [k for k in keys if k not in found]
        if missing:
            read = read_many(missing, self._changed)
            with self._lock:
                if self._changes == changes:
                    if len(self._entries) + len(read) > self._limit:
                        self._entries.clear()
                    self._entries.update(read)
            found.update(read)
        return found

    def holds(self, key: str) -> bool:
        """Whether `key` is kept now (get() would ask ZooKeeper nothing)."""
        with self._lock:
            return key in self._entries

    def forget(self, key: str) -> None:
        """Read `key` from ZooKeeper next time (its znode changed, or this process just wrote it)."""
        with self._lock:
            self._entries.pop(key, None)
            self._changes += 1

    def clear(self) -> None:
        """Read every key from ZooKeeper next time."""
        with self._lock:
            self._entries.clear()
            self._changes += 1

    def close(self) -> None:
        """Stop hearing the session's state (the client may outlive this cache: an instance's election shares it)."""
        self._client.remove_listener(self._session_changed)

    def _changed(self, event: WatchedEvent) -> None:
        """On kazoo's thread: a watched znode changed."""
        self.forget(self._key_of(event.path))

    def _session_changed(self, state: Any) -> None:
        """On kazoo's thread, at any change of the session's state: forget everything (never blocks)."""
        self.clear()
        log.debug("ZooKeeper session %s: %s will be read again", state, self._what)
