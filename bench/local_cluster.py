"""A replicated cluster of real processes on 127.0.0.1 for benchmarks: a coordinator and data nodes on free
ports with a short node session, so a killed leader is replaced within seconds (the tests' NodeCluster is the
same idea; benchmarks do not import tests)."""
from __future__ import annotations

import logging
import os
from types import TracebackType

from fabric.server.launcher import CoordinatorProcess, NodeProcess

log = logging.getLogger(__name__)


class LocalCluster:
    """A coordinator (SQLite store, under root/coordinator; or `instances` of them sharing that directory, over
    the zk:// `store`) and data nodes 1..`nodes` (root/node<i>, on loopback address `hosts[i - 1]` when given, else
    127.0.0.1), declared dead `session_timeout_ms` after their last heartbeat (sent every `heartbeat_ms`);
    `coordinator_extra` are more coordinator options. Use as a context
    manager: every process is stopped on the way out, also on Ctrl-C or an error."""

    def __init__(self, root: str, nodes: int, session_timeout_ms: int, heartbeat_ms: int,
                 coordinator_extra: tuple[str, ...] = (), instances: int = 1, store: str | None = None,
                 hosts: tuple[str, ...] = ()) -> None:
        self.root, self.count, self.hosts = root, nodes, hosts
        self.session_timeout_ms, self.heartbeat_ms = session_timeout_ms, heartbeat_ms
        self.coordinators = [CoordinatorProcess(os.path.join(root, "coordinator"), store=store, extra=(
            "--node-session-timeout-ms", str(session_timeout_ms), *coordinator_extra)) for _ in range(instances)]
        self.nodes: dict[int, NodeProcess] = {}

    @property
    def coordinator(self) -> CoordinatorProcess:
        """The first coordinator instance (the only one, unless `instances` was given)."""
        return self.coordinators[0]

    @property
    def url(self) -> str:
        if len(self.coordinators) == 1:
            return self.coordinator.url()
        return "fabric://" + ",".join(c.address for c in self.coordinators)

    def _node_options(self, node_id: int) -> tuple[str, ...]:
        """Node `node_id`'s options: the timings, and a rack of its own (rack-<id>), for reads from followers."""
        return ("--heartbeat-interval-ms", str(self.heartbeat_ms), "--session-timeout-ms", str(self.session_timeout_ms),
                "--rack", f"rack-{node_id}")

    def start(self) -> LocalCluster:
        """Start the coordinator instances, then the nodes; return once every node has registered."""
        for coordinator in self.coordinators:
            coordinator.start()
        for i in range(1, self.count + 1):
            self.nodes[i] = NodeProcess(i, os.path.join(self.root, f"node{i}"), self.url, extra=self._node_options(i),
                                        host=self.hosts[i - 1] if self.hosts else "127.0.0.1")
            self.nodes[i].start()
        log.info("cluster %s: %d nodes", self.url, self.count)
        return self

    def restart(self, node_id: int) -> NodeProcess:
        """Start node `node_id` again (after a kill) on its port and data directory; return once it registered."""
        self.nodes[node_id] = self.nodes[node_id].restarted()
        return self.nodes[node_id]

    def close(self) -> None:
        """Stop the nodes, then the coordinator instances (SIGTERM, SIGKILL after 10 s)."""
        for node in self.nodes.values():
            node.stop()
        for coordinator in self.coordinators:
            coordinator.stop()

    def __enter__(self) -> LocalCluster:
        try:
            return self.start()
        except BaseException:  # a node that failed to start, or Ctrl-C: stop what did start
            self.close()
            raise

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
