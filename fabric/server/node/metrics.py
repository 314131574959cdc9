"""A data node's own Prometheus metrics: replication as the leader of each partition sees it, read from the
ReplicaManager at scrape time (its `describe()`; nothing is counted on the produce or fetch path).

For the partitions this node leads:
- fabric_leader_partitions, and fabric_under_replicated_partitions (the leader's ISR is smaller than the
  replicas; the coordinator's gauge of the same name counts the whole cluster as the controller has it);
- fabric_replication_lag_messages{topic,partition,follower}: the leader's log end − the follower's (absent
  until the follower's first fetch under the current leader epoch), and fabric_replication_lag_seconds: how
  long since the follower was last caught up (replica.lag.time.max.ms drops it from the ISR past that);
- fabric_partition_high_watermark and fabric_partition_log_end_offset{topic,partition}: a consumer group's lag
  in a replicated topic is the high watermark minus the group's committed offset (the coordinator's
  fabric_consumer_group_committed_offset).
For every replica it hosts: fabric_offline_replicas{health}, the replicas it cannot serve (Kafka's
OfflineReplicaCount; storage_health), reported to the controller with its heartbeats, and those not yet
scrubbed since the node started (Unverified, not reported). The scrubber's
fabric_log_scrubbed_bytes_total, and fabric_log_damaged_ranges_total / fabric_log_repaired_ranges_total: damaged
ranges found (by the scrubber or a read) and repaired from other replicas. fabric_producer_ids: the idempotent
producers whose state the replicas hold in memory (Kafka's ProducerIdCount), each forgotten once silent for
producer.id.expiration.ms.
"""
from __future__ import annotations

import logging
from collections import Counter
from typing import Any, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from fabric.server.node.partition import Role
from fabric.server.node.replica_manager import ReplicaManager
from fabric.server.node.scrubber import Scrubber
from fabric.server.node.storage_health import Health

log = logging.getLogger(__name__)
PARTITION = ["topic", "partition"]
FOLLOWER = ["topic", "partition", "follower"]


class ReplicationCollector(Collector):
    """The replication state of the partitions `replicas` leads, as gauges, and the health of its replicas (with
what `scrubber` walked, if the node scrubs)."""

    def __init__(self, replicas: ReplicaManager, scrubber: Scrubber | None = None) -> None:
        self.replicas, self.scrubber = replicas, scrubber

    def collect(self) -> Iterator[Metric]:
        led = GaugeMetricFamily("fabric_leader_partitions", "partitions this node leads")
        under = GaugeMetricFamily("fabric_under_replicated_partitions", "partitions this node leads whose ISR is "
                                  "smaller than their replicas")
        lag = GaugeMetricFamily("fabric_replication_lag_messages", "records a follower lacks: the leader's log end "
                                "minus the follower's", labels=FOLLOWER)
        lag_s = GaugeMetricFamily("fabric_replication_lag_seconds", "time since a follower was last caught up with "
                                  "the leader", labels=FOLLOWER)
        hw = GaugeMetricFamily("fabric_partition_high_watermark", "a led partition's high watermark (consumers "
                               "read below it)", labels=PARTITION)
        end = GaugeMetricFamily("fabric_partition_log_end_offset", "a led partition's log end offset",
                                labels=PARTITION)
        offline = GaugeMetricFamily("fabric_offline_replicas", "replicas this node cannot serve (Offline, "
                                    "Damaged: reported to the controller) or has not scrubbed since it started "
                                    "(Unverified)", labels=["health"])
        count = under_count = 0
        unhealthy: Counter[str] = Counter()
        for described in self.replicas.describe():
            replica: Mapping[str, Any] = described
            if replica["health"] != Health.HEALTHY.value:
                unhealthy[replica["health"]] += 1
            if replica["role"] != Role.LEADER.value or "log_end" not in replica:
                continue
            labels = [replica["topic"], str(replica["partition"])]
            followers, leader_end = replica["followers"], replica["log_end"]
            count += 1
            under_count += len(replica["isr"]) < len(followers) + 1
            hw.add_metric(labels, replica["high_watermark"])
            end.add_metric(labels, leader_end)
            for follower, progress in sorted(followers.items()):
                if progress["log_end"] >= 0:
                    lag.add_metric([*labels, follower], leader_end - progress["log_end"])
                lag_s.add_metric([*labels, follower], progress["lag_ms"] / 1000)
        led.add_metric([], count)
        under.add_metric([], under_count)
        for health in Health:
            if health is not Health.HEALTHY:
                offline.add_metric([health.value], unhealthy[health.value])
        yield from (led, under, lag, lag_s, hw, end, offline)
        yield GaugeMetricFamily("fabric_producer_ids", "idempotent producers whose state this node's replicas hold "
                                "(each forgotten once silent for producer.id.expiration.ms)",
                                self.replicas.producer_ids())
        yield CounterMetricFamily("fabric_log_scrubbed_bytes", "bytes of frames the scrubber checked",
                                  self.scrubber.scrubbed_bytes if self.scrubber is not None else 0)
        yield CounterMetricFamily("fabric_log_damaged_ranges", "damaged ranges found in this node's replicas",
                                  self.replicas.health.damage_found)
        yield CounterMetricFamily("fabric_log_repaired_ranges", "damaged ranges repaired from other replicas' copies",
                                  self.replicas.repairer.repaired)
