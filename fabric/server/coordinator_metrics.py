"""The coordinator's own Prometheus metrics: what its controller decides and sees, and consumer-group lag.

Counted where the controller stores its decisions (ActiveController, through ControllerDriver.on_decision),
once per decision however many nodes notice it:
- fabric_leader_elections_total{kind}: `elected` (a clean or preferred election), `unclean_elected`, `offline`
  (the leader was lost and no replica could take over);
- fabric_isr_shrinks_total / fabric_isr_expands_total: decisions that removed / added ISR members (an unclean
  election that replaces the ISR counts as both).
These count on the instance that decided: after a controller failover the new one starts from zero.

Read from the live state at each scrape, and only on the instance running the controller (elsewhere the
partition gauges are 0 and no group lag is given, so sums over instances stay right):
- fabric_active_controller, fabric_live_nodes, fabric_offline_partitions (no leader),
  fabric_under_replicated_partitions (ISR smaller than the replicas, offline ones included);
- fabric_consumer_group_committed_offset{group,topic,partition} for every committed offset, and
  fabric_consumer_group_lag{group,topic,partition}: log end − committed offset for topics stored in the
  coordinator's data directory; for a replicated topic, the high watermark its leader last reported with its
  heartbeat (at most a heartbeat interval old) − committed offset;
- fabric_offsets_appends_total{path}, where the offsets topic is replicated on the nodes: its commit appends sent
  from the event loop (`loop`) and handed to a worker thread (`worker`, fabric.server.offsets_on_loop).
"""
from __future__ import annotations

import logging
from typing import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from fabric.common.errors import FabricError
from fabric.common.types import ClusterDescription
from fabric.coordinator.controller import Decision, DecisionKind
from fabric.server.cluster_broker import ClusterBroker
from fabric.server.controller_driver import ControllerDriver, ControllerState

log = logging.getLogger(__name__)
ELECTIONS = {DecisionKind.ELECTED: "elected", DecisionKind.UNCLEAN_ELECTED: "unclean_elected",
             DecisionKind.OFFLINE: "offline"}
GROUP_LABELS = ["group", "topic", "partition"]


class DecisionCounters:
    """Leader elections by kind and ISR shrinks and expands, counted from the controller's decisions."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.elections = Counter("fabric_leader_elections", "partition leaders elected or lost by the controller, "
                                 "by kind: elected, unclean_elected, offline", ["kind"], registry=registry)
        for kind in ELECTIONS.values():
            self.elections.labels(kind)  # present at 0 from the start
        self.isr_shrinks = Counter("fabric_isr_shrinks", "controller decisions that removed in-sync replicas",
                                   registry=registry)
        self.isr_expands = Counter("fabric_isr_expands", "controller decisions that added in-sync replicas",
                                   registry=registry)

    def decided(self, decision: Decision) -> None:
        """Count one decision the controller stored."""
        if decision.kind in ELECTIONS:
            self.elections.labels(ELECTIONS[decision.kind]).inc()
        if decision.before is None:
            return  # a partition created: no ISR changed
        if decision.kind is DecisionKind.REASSIGNED and decision.before.leader != decision.after.leader:
            self.elections.labels("elected").inc()  # a reassignment handed leadership over
        before, after = set(decision.before.isr), set(decision.after.isr)
        if before - after:
            self.isr_shrinks.inc()
        if after - before:
            self.isr_expands.inc()


class ControllerCollector(Collector):
    """The controller's view at scrape time: whether it runs here, live nodes, offline and under-replicated
    partitions."""

    def __init__(self, controller: ControllerDriver) -> None:
        self.controller = controller

    def collect(self) -> Iterator[Metric]:
        running = self.controller.state is ControllerState.RUNNING
        yield GaugeMetricFamily("fabric_active_controller", "1 while this coordinator instance runs the controller",
                                value=int(running))
        try:
            cluster = self.controller.describe_cluster() if running else ClusterDescription(0, (), {})
        except FabricError as exc:
            log.warning("metrics: cannot read the cluster's state (%s); leaving its gauges out", exc)
            return
        partitions = cluster.partitions.values()
        yield GaugeMetricFamily("fabric_live_nodes", "data nodes whose lease the controller holds",
                                value=sum(n.alive for n in cluster.nodes))
        yield GaugeMetricFamily("fabric_offline_partitions", "replicated partitions without a leader",
                                value=sum(reg.state.leader is None for reg in partitions))
        yield GaugeMetricFamily("fabric_under_replicated_partitions", "replicated partitions whose ISR is smaller "
                                "than their replicas (as the controller has it)",
                                value=sum(len(reg.state.isr) < len(reg.assignment.replicas) for reg in partitions))


class GroupLagCollector(Collector):
    """Every group's committed offsets and, where the log is in this instance's directory, its lag; only while
    `is_active()` (the instance that serves groups)."""

    def __init__(self, broker: ClusterBroker, is_active: Callable[[], bool]) -> None:
        self.broker, self.is_active = broker, is_active

    def collect(self) -> Iterator[Metric]:
        committed = GaugeMetricFamily("fabric_consumer_group_committed_offset", "a group's committed offset (the "
                                      "next offset it reads)", labels=GROUP_LABELS)
        lag = GaugeMetricFamily("fabric_consumer_group_lag", "records between a group's committed offset and the "
                                "log end (a replicated topic's: the high watermark its leader last reported)",
                                labels=GROUP_LABELS)
        if self.is_active():
            try:
                self._read(committed, lag)
            except FabricError as exc:
                log.warning("metrics: cannot read the groups' offsets (%s); leaving them out", exc)
        yield committed
        yield lag

    def _read(self, committed: GaugeMetricFamily, lag: GaugeMetricFamily) -> None:
        store = self.broker.coordinator
        local: dict[str, bool] = {}  # topic -> stored here (not replicated), read once per scrape
        for group in store.list_groups():
            for (topic, partition), position in sorted(store.committed(group).items()):
                labels = [group, topic, str(partition)]
                committed.add_metric(labels, position.offset)
                if topic not in local:
                    local[topic] = not store.replicated(topic)
                if local[topic]:
                    lag.add_metric(labels, self.broker.log(topic, partition).end_offset - position.offset)
                elif (topic, partition) in self.broker.controller.high_watermarks:
                    end = self.broker.controller.high_watermarks[(topic, partition)]
                    lag.add_metric(labels, max(end - position.offset, 0))


class OffsetsAppendsCollector(Collector):
    """fabric_offsets_appends_total{path}: the replicated offsets topic's commit appends, by where they were sent
    from (fabric.server.offsets_on_loop)."""

    def __init__(self, appends: Callable[[], dict[str, int]]) -> None:
        self.appends = appends

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily("fabric_offsets_appends", "commit appends to the replicated offsets topic, by "
                                     "path: loop (sent from the event loop), worker (handed to a worker thread: "
                                     "the partition busy, its leader or connection unknown, an answer failed)",
                                     labels=["path"])
        for path, count in sorted(self.appends().items()):
            family.add_metric([path], count)
        yield family


def register(registry: CollectorRegistry, broker: ClusterBroker, is_active: Callable[[], bool],
             offsets_appends: Callable[[], dict[str, int]] | None = None) -> None:
    """Add the coordinator's metrics over `broker` (and its controller) to `registry`, and those of its replicated
    offsets topic's appends (`offsets_appends`) where it has one."""
    broker.controller.on_decision = DecisionCounters(registry).decided
    registry.register(ControllerCollector(broker.controller))
    registry.register(GroupLagCollector(broker, is_active))
    if offsets_appends is not None:
        registry.register(OffsetsAppendsCollector(offsets_appends))
