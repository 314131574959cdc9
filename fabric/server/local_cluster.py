"""A replicated cluster of real processes on loopback, for benchmarks and tests: coordinator instances and data
nodes (fabric.server.launcher's processes) on free ports, with a short node session so that a killed node is
declared dead within seconds. `fabric cluster up` is the same for a person at a terminal, with a state file."""
from __future__ import annotations

import logging
import os
from types import TracebackType
from typing import Mapping, Sequence

from fabric.server.launcher import CoordinatorProcess, NodeProcess

log = logging.getLogger(__name__)


def node_racks(nodes: int) -> tuple[str, ...]:
    """A rack of its own for each of `nodes` nodes (rack-1, rack-2, ...): what reads from followers go by."""
    return tuple(f"rack-{i}" for i in range(1, nodes + 1))


class LocalCluster:
    """Coordinator instances under `root` (`instances` of them sharing root/coordinator, over the SQLite store
    there or over `store`, a zk:// URL; with `separate_dirs`, each in root/coordinator<i>) and data nodes
    1..`nodes` (root/node<i>, or `data_dirs[i]` with its log in root/logs, so the log outlives the directory; on
    loopback address `hosts[i - 1]` where given, else 127.0.0.1; in rack `racks[i - 1]` where given), a node
    declared dead `session_timeout_ms` after its last heartbeat, sent every `heartbeat_ms`.

    `coordinator_extra` and `node_extra` are more options (after the defaults, so they override them);
    `node_token` is the nodes' own token (handed to them in their environment, as a token must never be on a
    command line); with `tls` ((certificate, key) of the loopback address), every process serves TLS only and
    trusts that certificate ($FABRIC_TLS_CA in their environment: the caller sets it). `start()` returns once
    every node registered; `close()` stops every process; as a context manager, it starts and, on the way out
    (an error, Ctrl-C), stops whatever it started."""

    def __init__(self, root: str | os.PathLike[str], nodes: int = 3, session_timeout_ms: int = 6000,
                 heartbeat_ms: int = 500, coordinator_extra: tuple[str, ...] = (), instances: int = 1,
                 store: str | None = None, hosts: Sequence[str] = (), *, racks: Sequence[str] = (),
                 node_extra: tuple[str, ...] = (), node_token: str | None = None, separate_dirs: bool = False,
                 data_dirs: Mapping[int, str | os.PathLike[str]] | None = None,
                 tls: tuple[str, str] | None = None) -> None:
        self.root, self.count, self.hosts, self.racks, self.tls = str(root), nodes, tuple(hosts), tuple(racks), tls
        self.session_timeout_ms, self.heartbeat_ms = session_timeout_ms, heartbeat_ms
        self.node_extra, self.node_token = node_extra, node_token
        self.data_dirs = {i: str(d) for i, d in (data_dirs or {}).items()}
        self.coordinators = [
            CoordinatorProcess(os.path.join(self.root, f"coordinator{i}" if separate_dirs else "coordinator"),
                               store=store, tls=tls,
                               extra=("--node-session-timeout-ms", str(session_timeout_ms), *coordinator_extra))
            for i in range(1, instances + 1)]
        self.nodes: dict[int, NodeProcess] = {}

    @property
    def coordinator(self) -> CoordinatorProcess:
        """The first coordinator instance (the only one, unless `instances` was given)."""
        return self.coordinators[0]

    @property
    def url(self) -> str:
        return ("fabric+tls://" if self.tls else "fabric://") + ",".join(c.address for c in self.coordinators)

    def _node(self, node_id: int) -> NodeProcess:
        """Node `node_id` as configured (not started)."""
        options = ("--heartbeat-interval-ms", str(self.heartbeat_ms), "--session-timeout-ms",
                   str(self.session_timeout_ms), *self.node_extra,
                   *(("--rack", self.racks[node_id - 1]) if self.racks else ()))
        data_dir = self.data_dirs.get(node_id, os.path.join(self.root, f"node{node_id}"))
        return NodeProcess(node_id, data_dir, self.url, token=self.node_token, tls=self.tls, extra=options,
                           log_dir=os.path.join(self.root, "logs") if node_id in self.data_dirs else None,
                           host=self.hosts[node_id - 1] if self.hosts else "127.0.0.1")

    def start(self) -> LocalCluster:
        """Start the coordinator instances, then the nodes; return once every node has registered."""
        for coordinator in self.coordinators:
            coordinator.start()
        for i in range(1, self.count + 1):
            self.nodes[i] = self._node(i)
            self.nodes[i].start()
        log.info("cluster %s: %d nodes", self.url, self.count)
        return self

    def restart(self, node_id: int) -> NodeProcess:
        """Start node `node_id` again (after a kill) on its port (another, where a process took it meanwhile:
        NodeProcess.restarted) and data directory; return once it registered."""
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
