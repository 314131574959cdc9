"""Fixtures of the integration tier: a real local[2] SparkSession and a real Spark standalone cluster, a real
ZooKeeper server, coordinator service processes, clusters of data nodes with calls straight to one server and the
replication tests' kit, consumer-group members in processes of their own, and notebooks run by a real kernel.

Child processes run scripts that import only the installed package (fabric...), never anything from tests/.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import uuid
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator, Mapping

import nbformat
import pyarrow as pa
import pyarrow.flight as flight
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

from fabric.common.records import to_storage
from fabric.server import wire
from fabric.server.launcher import CoordinatorProcess
from fabric.server.local_cluster import LocalCluster
from fabric.server.zookeeper import ZooKeeperServer

PYTHON = sys.executable
REPO = Path(__file__).resolve().parents[2]  # the checkout


@pytest.fixture(scope="session")
def demo_job() -> ModuleType:
    """jobs/demo.py loaded by its path (jobs/ is scripts, not a package): its CLICKS schema and sample_events()."""
    spec = importlib.util.spec_from_file_location("fabric_demo_job", REPO / "jobs" / "demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def spark():
    """One real local[2] SparkSession for the whole run (starting one costs seconds), with the JVM reader's jar
    where make install built it."""
    from pyspark.sql import SparkSession

    from fabric.spark import jar

    session = (SparkSession.builder.master("local[2]").appName("fabric-tests")
               .config("spark.jars", jar.with_reader())
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.sql.streaming.stopTimeout", "30s")
               .config("spark.python.worker.reuse", "true")
               .getOrCreate())
    session.sparkContext.setLogLevel("WARN")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_standalone(plain_module: Callable[[str], ModuleType], tmp_path_factory) -> Iterator[Any]:
    """The run's one Spark standalone cluster behind `spark_cluster`, stopped after the run, by process group."""
    cluster = plain_module("spark_cluster").SparkCluster(tmp_path_factory.mktemp("spark")).start()
    yield cluster
    cluster.stop()


@pytest.fixture
def spark_cluster(spark_standalone: Any) -> Iterator[Any]:
    """A real Spark standalone cluster shared by the run (tests/spark_cluster.py's SparkCluster): a master and 2
    workers of 1 core and 1 GiB on free 127.0.0.1 ports, started with pyspark's launcher. `master_url`,
    `submit(script, *args, conf=None, env=None, name=None)` → the spark-submit Popen (client mode),
    `supervise(...)` → a SupervisedJob (submitted again if Spark starved it), `run(...)` → its output once it
    succeeded, `output(popen)`, `wait(condition, what, *paths)` (as long as the cluster's logs or those paths
    change), `wait_for_app(name)` → the master's app entry,
    `executor_pids(app_id=None)` / `wait_for_executors(count, app_id=None)` → executor JVM pids,
    `kill_executor(pid=None, app_id=None)` → the pid SIGKILLed, once gone, `alive_workers()`, `state()`.
    The jobs a test submitted end with it, passed or failed."""
    yield spark_standalone
    spark_standalone.end_jobs()


# -- ZooKeeper ------------------------------------------------------------------------------------------------
# The test servers grant sessions of 0.4 s .. MAX_SESSION_TIMEOUT_MS (60 s): ZooKeeper's own maximum (20 ticks,
# 4 s here) would cut every client's session short enough to expire on a loaded machine; clients asking for
# nothing get the fabric's default (18 s), and tests that wait for an expiry ask for short sessions.


@pytest.fixture(scope="session")
def zookeeper_server():
    """One real ZooKeeper server for the whole test run (fabric.server.zookeeper: a JVM from pyspark's jars),
    granting sessions of 0.4 s .. MAX_SESSION_TIMEOUT_MS."""
    server = ZooKeeperServer().start()
    yield server
    server.close()


@pytest.fixture
def own_zookeeper(tmp_path) -> Iterator[ZooKeeperServer]:
    """A ZooKeeper server of the test's own (data in tmp_path/zk), for tests that stop and restart it; it grants
    sessions of 0.4 s .. MAX_SESSION_TIMEOUT_MS and is closed after the test."""
    server = ZooKeeperServer(root=str(tmp_path / "zk")).start()
    yield server
    server.close()


@pytest.fixture(scope="session")
def zookeeper(zookeeper_server: ZooKeeperServer) -> str:
    """The connect string ("127.0.0.1:port") of the session's ZooKeeper server."""
    return zookeeper_server.hosts


@pytest.fixture
def zk_url(zookeeper_server: ZooKeeperServer) -> str:
    """A zk:// URL with a fresh chroot, so each test sees an empty namespace."""
    return zookeeper_server.url(f"/test-{uuid.uuid4().hex[:12]}")


# -- coordinator service processes ----------------------------------------------------------------------------
@pytest.fixture
def self_signed(tmp_path) -> Callable[[str], tuple[str, str]]:
    """self_signed(name) → (certificate, key) PEM files tmp_path/<name>.pem and <name>.key of a new self-signed
    certificate for 127.0.0.1 (made with openssl), for a server's --tls-cert / --tls-key and a client's ?ca=."""
    def make(name: str) -> tuple[str, str]:
        cert, key = str(tmp_path / f"{name}.pem"), str(tmp_path / f"{name}.key")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=127.0.0.1",
                        "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
        return cert, key
    return make


@pytest.fixture
def tls_files(self_signed) -> tuple[str, str]:
    """(certificate, key) of a self-signed certificate for 127.0.0.1 (self_signed)."""
    return self_signed("cert")


@pytest.fixture
def coordinators(tmp_path) -> Iterator[Callable[..., CoordinatorProcess]]:
    """start(data_dir=None, **kwargs) → a started CoordinatorProcess (`python -m fabric.server.service`; data dir
    defaults to tmp_path/data); all stopped after the test."""
    started: list[CoordinatorProcess] = []

    def start(data_dir: str | None = None, **kwargs) -> CoordinatorProcess:
        instance = CoordinatorProcess(data_dir or str(tmp_path / "data"), **kwargs)
        started.append(instance)
        return instance.start()

    yield start
    for instance in started:
        instance.stop()


@pytest.fixture
def secured_service(coordinators, tmp_path) -> Callable[..., CoordinatorProcess]:
    """start(tokens, grants, *extra, data_dir=None) → a started service that authenticates `tokens`
    ({token: principal}) and authorizes the principal admin on every topic, group and transactional id plus
    `grants` (ACL file lines, "principal operation resource"); `extra` are more service arguments."""
    def start(tokens: dict[str, str], grants: str, *extra: str, data_dir: str | None = None) -> CoordinatorProcess:
        (tmp_path / "tokens").write_text("".join(f"{token} {principal}\n" for token, principal in tokens.items()))
        (tmp_path / "acls").write_text("admin admin topic:*\nadmin admin group:*\nadmin admin transactional-id:*\n"
                                       + grants)
        files = ("--tokens-file", str(tmp_path / "tokens"), "--acl-file", str(tmp_path / "acls"))
        return coordinators(data_dir, extra=(*files, *extra))

    return start


@pytest.fixture
def zookeeper_instances(coordinators, zk_url, tmp_path) -> Callable[..., tuple[dict[str, CoordinatorProcess], str]]:
    """instances(session_ms, count=3) → `count` coordinator instances sharing tmp_path/data with their metadata
    in ZooKeeper (one is elected active): the instances by address, and the fabric:// URL listing them all."""
    def start(session_ms: int, count: int = 3) -> tuple[dict[str, CoordinatorProcess], str]:
        config = tmp_path / "ha.properties"
        config.write_text(f"coordinator.store={zk_url}\nzookeeper.session.timeout.ms={session_ms}\n")
        instances = {i.address: i for i in (coordinators(str(tmp_path / "data"), extra=("--config", str(config)))
                                            for _ in range(count))}
        return instances, "fabric://" + ",".join(instances)

    return start


@pytest.fixture
def the_active() -> Callable[[Any], Any]:
    """the_active(fab) → the status of the one active instance of fab's URL, or None while there is not exactly
    one."""
    def active(fab) -> Any:
        statuses = [s for s in fab.cluster.statuses().values() if not isinstance(s, Exception) and s.active]
        return statuses[0] if len(statuses) == 1 else None

    return active


# -- a replicated cluster: a coordinator and data nodes --------------------------------------------------------
class NodeCluster(LocalCluster):
    """The tests' LocalCluster (coordinator instances and data nodes 1..`nodes` as real processes under `root`),
    with quick leases a loaded machine still meets: a node is dead SESSION_MS after its last heartbeat, sent every
    HEARTBEAT_MS (death tests wait up to 30 s). The other arguments are LocalCluster's."""

    SESSION_MS, HEARTBEAT_MS = 6000, 500

    def __init__(self, root: Path, nodes: int = 3, coordinator_extra: tuple[str, ...] = (),
                 node_token: str | None = None, instances: int = 1, node_extra: tuple[str, ...] = (),
                 racks: tuple[str, ...] = (), separate_dirs: bool = False,
                 data_dirs: Mapping[int, Path] | None = None, tls: tuple[str, str] | None = None) -> None:
        super().__init__(root, nodes, self.SESSION_MS, self.HEARTBEAT_MS, coordinator_extra, instances, racks=racks,
                         node_extra=node_extra, node_token=node_token, separate_dirs=separate_dirs,
                         data_dirs=data_dirs, tls=tls)


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory) -> Iterator[NodeCluster]:
    """One NodeCluster of 3 nodes for a test module's tests that kill nothing and use topics of their own (its
    coordinator aborts timed-out transactions every second)."""
    cluster = NodeCluster(tmp_path_factory.mktemp("cluster"),
                          coordinator_extra=("--transaction-cleanup-interval-ms", "1000")).start()
    yield cluster
    cluster.close()


def _secured(root: Path, tokens: Mapping[str, str], acls: str) -> NodeCluster:
    """A started NodeCluster of 1 node in `root` with token authentication (`tokens`: {token: principal}) and ACLs
    (`acls`: ACL file lines). The coordinator and the node reach each other with the token of principal "node",
    which `acls` grants cluster_action on the cluster."""
    (root / "tokens").write_text("".join(f"{token} {principal}\n" for token, principal in tokens.items()))
    (root / "acls").write_text(acls)
    files = ("--tokens-file", str(root / "tokens"), "--acl-file", str(root / "acls"))
    node_token = next(token for token, principal in tokens.items() if principal == "node")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("FABRIC_TOKEN", node_token)  # the coordinator's token towards the node
        cluster = NodeCluster(root, nodes=1, coordinator_extra=files, node_token=node_token,
                              node_extra=files)
        try:
            cluster.start()
        except BaseException:
            cluster.close()
            raise
    return cluster


@pytest.fixture(scope="module")
def secured_cluster(request, tmp_path_factory) -> Iterator[NodeCluster]:
    """One NodeCluster of 1 node with token authentication and ACLs, for a test module's tests (they may restart the
    node): the module's TOKENS ({token: principal}) and ACLS (ACL file lines). The coordinator and the node reach
    each other with the token of principal "node", which ACLS grants cluster_action on the cluster."""
    cluster = _secured(tmp_path_factory.mktemp("secured"), request.module.TOKENS, request.module.ACLS)
    yield cluster
    cluster.close()


@pytest.fixture(scope="module")
def protocol_cluster(protocol_kit: ModuleType, tmp_path_factory) -> Iterator[NodeCluster]:
    """secured_cluster with the protocol tests' TOKENS and ACLS (tests/protocol_kit.py), one for each test module
    of them."""
    cluster = _secured(tmp_path_factory.mktemp("secured"), protocol_kit.TOKENS, protocol_kit.ACLS)
    yield cluster
    cluster.close()


@pytest.fixture(scope="module")
def protocol_admin(protocol_kit: ModuleType, protocol_cluster: NodeCluster) -> Iterator[Any]:
    """The admin's client of protocol_cluster, with topic mine (2 partitions, at the coordinator) and mine-rf (1
    partition on the node)."""
    handle = protocol_kit.open_admin(protocol_cluster)
    yield handle
    handle.close()


@pytest.fixture(scope="module")
def racked_cluster(tmp_path_factory) -> Iterator[NodeCluster]:
    """One NodeCluster of 3 nodes, node i in rack "rack-i" (a reader with client rack rack-i reads from node i),
    each serving Prometheus metrics on a port of its own (its status' metrics_port), for a test module's tests that
    kill nothing and use topics of their own."""
    cluster = NodeCluster(tmp_path_factory.mktemp("racked"), node_extra=("--metrics-port", "0"),
                          racks=("rack-1", "rack-2", "rack-3")).start()
    yield cluster
    cluster.close()


@pytest.fixture(scope="session")
def replicated_cluster(tmp_path_factory) -> Iterator[NodeCluster]:
    """One NodeCluster of 3 nodes whose coordinator places every topic on 3 replicas
    (--default-replication-factor 3), for the client suite; its users delete their topics after each test."""
    cluster = NodeCluster(tmp_path_factory.mktemp("replicated"),
                          coordinator_extra=("--default-replication-factor", "3")).start()
    yield cluster
    cluster.close()


@pytest.fixture(scope="module")
def limited_cluster(tmp_path_factory) -> Iterator[NodeCluster]:
    """One NodeCluster of 1 node whose coordinator and node refuse a request over LIMITED_REQUEST_BYTES
    (socket.request.max.bytes), for a test module's tests of limits; a test that pauses one of its processes
    resumes it and waits until the node is alive again."""
    limit = ("--socket-request-max-bytes", str(LIMITED_REQUEST_BYTES))
    cluster = NodeCluster(tmp_path_factory.mktemp("limited"), nodes=1, coordinator_extra=limit,
                          node_extra=limit).start()
    yield cluster
    cluster.close()


LIMITED_REQUEST_BYTES = 4 << 20


@pytest.fixture
def node_cluster(tmp_path) -> Iterator[Callable[..., NodeCluster]]:
    """start(nodes=3, coordinator_extra=(), node_token=None, instances=1, node_extra=(), racks=(),
    separate_dirs=False, data_dirs=None, tls=None) → a started NodeCluster of the test's own (for tests that kill or
    restart processes); stopped after the test."""
    started: list[NodeCluster] = []

    def start(nodes: int = 3, coordinator_extra: tuple[str, ...] = (), node_token: str | None = None,
              instances: int = 1, node_extra: tuple[str, ...] = (), racks: tuple[str, ...] = (),
              separate_dirs: bool = False, data_dirs: Mapping[int, Path] | None = None,
              tls: tuple[str, str] | None = None) -> NodeCluster:
        started.append(NodeCluster(tmp_path / f"cluster{len(started)}", nodes, coordinator_extra, node_token,
                                   instances, node_extra, racks, separate_dirs, data_dirs, tls))
        return started[-1].start()

    yield start
    for cluster in started:
        cluster.close()


@pytest.fixture(scope="session")
def offsets_kit(plain_module: Callable[[str], ModuleType]) -> ModuleType:
    """tests/offsets_kit.py: HaOffsetsCluster, shared_out, group_served_by, refuses_bad_group_fields."""
    return plain_module("offsets_kit")


@pytest.fixture(scope="session")
def protocol_kit(plain_module: Callable[[str], ModuleType]) -> ModuleType:
    """tests/protocol_kit.py: TOKENS and ACLS (of protocol_cluster), open_admin, rows, protocol_address, connect,
    end_offset, hello, until_closed."""
    return plain_module("protocol_kit")


@pytest.fixture(scope="session")
def replication(plain_module: Callable[[str], ModuleType], storage: Any) -> Any:
    """The replication tests' kit (tests/replication_kit.py's ReplicationKit), each concept once: asking
    (state: the controller's LeaderAndIsr, described/led: the leader's description, status(node, topic, p): the
    node's status of its replica, follower), waiting (eventually, wait_elected, wait_isr, wait_offline,
    wait_in_sync, wait_quiet; pause/resume nodes; append_alone: a leader's divergent tail), writing and reading
    with a history (values, sender: a recorded producer, writers: background acks=all writers, final_read
    through the leader), replicas on disk (partition_dir, wipe, assert_identical_replicas: every replica's frames
    byte for byte) and the controllers' ZooKeeper states (zk_client, zk_states). Session-wide: it keeps no
    state; the tests pass it their recorders and history."""
    return plain_module("replication_kit").ReplicationKit(storage)


class RawCalls:
    """Calls straight to one server (a coordinator instance or a data node): no routing, no retry, a refusal
    raised as the fabric exception. Tests use them to ask one particular node, e.g. a deposed leader quoting its
    old leader epoch."""

    @staticmethod
    def call(server: str, call: Callable[[flight.FlightClient, flight.FlightCallOptions], Any],
             token: str | None = None) -> Any:
        """Run `call` (client, options) against `server` with a 10 s deadline and `token`, if given."""
        headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
        with flight.connect(f"grpc+tcp://{server}") as client:
            try:
                return call(client, flight.FlightCallOptions(headers=headers, timeout=10))
            except flight.FlightError as exc:
                raise wire.from_flight_error(exc) from None

    def action(self, server: str, name: str, /, token: str | None = None, **kwargs: Any) -> Any:
        """The first result of action `name` (kwargs: its arguments), decoded."""
        return self.call(server, lambda c, o: wire.loads(next(iter(c.do_action(wire.action(name, **kwargs), o)))
                                                          .body), token)

    @staticmethod
    def append_call(topic: str, partition: int = 0, leader_epoch: int | None = None, value: bytes = b"raw",
                    acks: str = "all", timeout_ms: int = 8000) -> Callable[..., Any]:
        """A DoPut appending one record of `value` (a node waits up to `timeout_ms` for acks=all, less than the
        call's deadline, so its own answer comes back)."""
        rows = to_storage(pa.table({"value": [value]}), None, 1_000_000).to_batches()[0]

        def put(client: flight.FlightClient, options: flight.FlightCallOptions) -> Any:
            descriptor = wire.put_descriptor("append", topic=topic, partition=partition, codec="none",
                                             leader_epoch=leader_epoch, acks=acks, timeout_ms=timeout_ms)
            writer, answers = client.do_put(descriptor, rows.schema, options)
            writer.write_batch(rows)
            writer.done_writing()
            try:
                return wire.loads(answers.read())
            finally:
                writer.close()
        return put

    def append(self, server: str, topic: str, partition: int, leader_epoch: int | None, value: bytes = b"raw",
               acks: str = "all", timeout_ms: int = 8000) -> int:
        """Append one record at `server` quoting `leader_epoch`; its offset."""
        return self.call(server, self.append_call(topic, partition, leader_epoch, value, acks, timeout_ms))


@pytest.fixture(scope="session")
def raw() -> RawCalls:
    """Calls straight to one server: call(server, call, token=None), action(server, name, token=None, **args),
    append_call(topic, ...) and append(server, topic, partition, leader_epoch, value=b"raw", acks="all",
    timeout_ms=8000) → the offset."""
    return RawCalls()


# -- the CLI and real disks ----------------------------------------------------------------------------------
@pytest.fixture
def fabric_cli() -> Callable[..., subprocess.CompletedProcess]:
    """fabric_cli(*args, stdin="", env=None, timeout=60) → the finished `python -m fabric.cli ARGS...` process
    (text output), for tests that need the command as users run it."""
    def run(*args: str, stdin: str = "", env: dict[str, str] | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run([PYTHON, "-m", "fabric.cli", *args], capture_output=True, text=True, timeout=timeout,
                              input=stdin, env=env)

    return run


class SmallDisk:
    """A tmpfs of `SIZE` bytes mounted at `path`: a real filesystem that can be filled up or remounted
    read-only, whose ENOSPC and EROFS hold for root too (which ignores file permissions and chattr-free dirs)."""

    SIZE = 16 << 20

    def __init__(self, path: Path) -> None:
        self.path = path
        self.filler = path / "filler"

    def fill(self) -> None:
        """Write to a filler file until the filesystem has no byte left."""
        with open(self.filler, "ab", buffering=0) as out:
            for chunk in (1 << 20, 4096, 1):
                try:
                    while True:
                        out.write(b"\0" * chunk)
                except OSError:
                    continue

    def free(self) -> None:
        self.filler.unlink()

    def remount(self, mode: str) -> None:
        """Remount "ro" or "rw"."""
        subprocess.run(["mount", "-o", f"remount,{mode}", str(self.path)], check=True, capture_output=True)


@pytest.fixture
def small_disk(tmp_path) -> Iterator[SmallDisk]:
    """A fresh SmallDisk at tmp_path/disk, unmounted after the test; skipped where this process may not mount a
    tmpfs (it needs root with CAP_SYS_ADMIN, as in the CI container)."""
    path = tmp_path / "disk"
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SmallDisk.SIZE}", "tmpfs", str(path)],
                             capture_output=True, text=True)
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}); the full-disk tests need root")
    try:
        yield SmallDisk(path)
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


# -- consumer-group members in processes of their own ---------------------------------------------------------
@pytest.fixture
def group_workers(plain_module: Callable[[str], ModuleType]) -> Iterator[Callable[..., Any]]:
    """workers(url, workdir, group, topic, script=MEMBER) → a Workers set (tests/group_workers.py) of `group`
    consuming `topic`; every member is stopped after the test."""
    kit = plain_module("group_workers")
    made: list[Any] = []

    def make(url: str, workdir: str, group: str, topic: str, script: str = kit.MEMBER) -> Any:
        made.append(kit.Workers(url, workdir, group, topic, script))
        return made[-1]

    yield make
    for workers in made:
        workers.close()


# -- notebooks ------------------------------------------------------------------------------------------------
class Notebooks:
    """Runs notebooks/<name> top to bottom in a real IPython kernel on a given python (this venv's by default, or
    another install's), from a kernelspec in a temp dir: nothing is registered globally."""

    CELL_TIMEOUT_S = 180

    def __init__(self, kernels: Path) -> None:
        self.kernels = kernels

    def _kernel(self, python: str) -> str:
        """A kernelspec directory holding one kernel: ipykernel on `python`."""
        root = self.kernels / uuid.uuid4().hex[:8]
        (root / "fabric").mkdir(parents=True)
        (root / "fabric" / "kernel.json").write_text(json.dumps({
            "argv": [python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Spark Fabric", "language": "python"}))
        return str(root)

    def run(self, name: str, tmp_path: Path, url: str | None = None, python: str = PYTHON,
            env: dict[str, str] | None = None) -> nbformat.NotebookNode:
        """Execute notebooks/<name> in tmp_path with FABRIC_URL=`url`, by default a fresh embedded fabric in
        tmp_path; any cell error fails the test."""
        nb = nbformat.read(REPO / "notebooks" / name, as_version=4)
        assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), \
            f"{name} is committed with outputs; clear them (Kernel > Restart & Clear Output) before committing"
        if url is None:
            fabric_dir = tmp_path / "fabric-data"  # not "fabric": in the kernel's cwd it would shadow the package
            fabric_dir.mkdir()
            url = f"file://{fabric_dir}"
        # The notebooks' temp dirs, the IPython profile and the connection file go to tmp_path, not $HOME or /tmp.
        env = {**(env or os.environ), "FABRIC_URL": url, "IPYTHONDIR": str(tmp_path / "ipython"),
               "TMPDIR": str(tmp_path)}
        km = KernelManager(kernel_name="fabric", kernel_spec_manager=KernelSpecManager(
            kernel_dirs=[self._kernel(python)]), connection_file=str(tmp_path / "kernel-connection.json"))
        client = NotebookClient(nb, km=km, timeout=self.CELL_TIMEOUT_S,
                                resources={"metadata": {"path": str(tmp_path)}})
        try:
            client.execute(env=env)
        finally:
            print(self.timings(nb))  # shown by pytest when the test fails
        return nb

    @staticmethod
    def timings(nb: nbformat.NotebookNode) -> str:
        """Seconds each executed code cell took, from the execution metadata nbclient records."""
        out = []
        for c in nb.cells:
            meta = c.metadata.get("execution", {})
            if "iopub.execute_input" in meta and "shell.execute_reply" in meta:
                took = (datetime.fromisoformat(meta["shell.execute_reply"].rstrip("Z"))
                        - datetime.fromisoformat(meta["iopub.execute_input"].rstrip("Z")))
                out.append(f"{c.id}={took.total_seconds():.1f}s")
        return "cell times: " + " ".join(out)


@pytest.fixture(scope="session")
def notebooks(tmp_path_factory) -> Notebooks:
    return Notebooks(tmp_path_factory.mktemp("kernels"))
