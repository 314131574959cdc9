"""The expiry of abandoned groups' offsets as a background pass (Kafka's offsets.retention.minutes; KIP-211 and
KIP-496; the store's expire_groups says which groups and offsets go): a coordinator instance's over the groups it
serves (fabric.server.service), and a writing embedded fabric's over its directory's groups (fabric.client.
embedded). Every step checks again under the lock a group's commits take, so the passes of several processes
over one directory forget a group once, and never one that commits or gains a member meanwhile.
"""
from __future__ import annotations

import logging
from typing import Callable

from fabric.coordinator.offsets_topic import TopicOffsets
from fabric.server.periodic import Periodic

log = logging.getLogger(__name__)
RETENTION_KEY = "offsets.retention.minutes"
OFFSETS_RETENTION_MINUTES = 7 * 24 * 60  # Kafka's default
CHECK_INTERVAL_KEY = "offsets.retention.check.interval.ms"
CHECK_INTERVAL_MS = 600_000  # Kafka's default


def start(store: TopicOffsets, retention_minutes: int, check_interval_ms: int, active: Callable[[], bool]
          ) -> Periodic:
    """Started: every `check_interval_ms` while `active()`, the groups of `store` that had no member and no commit
    for `retention_minutes` forgotten (and a live group's offsets of topics none of its members reads any more
    that are that old), each logged at INFO."""
    retention_ms = retention_minutes * 60_000

    def expire() -> None:
        expired = store.expire_groups(retention_ms)
        if expired.groups:
            log.info("group offsets: forgot %d group(s) with no member and no commit for %d minutes (%s): %s",
                     len(expired.groups), retention_minutes, RETENTION_KEY, ", ".join(expired.groups[:20]))
        for group, partitions in list(expired.partitions.items())[:20]:
            log.info("group offsets: group %s forgot its offsets of %s, topics none of its members subscribes to, "
                     "committed over %d minutes ago (%s)", group, ", ".join(f"{t}-{p}" for t, p in partitions[:20]),
                     retention_minutes, RETENTION_KEY)
    return Periodic("offsets-retention", check_interval_ms / 1000, active, expire, "expiring group offsets").start()
