"""A real standalone ZooKeeper server started from the zookeeper jar shipped inside pyspark (tests, benchmarks).

`ZooKeeperServer` binds a free 127.0.0.1 port with a temp data dir and can be stopped, killed and restarted
on the same port and data (to force session expiry).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time

from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from fabric.common.ports import free_port

TICK_MS = 200  # sessions may be as short as 2 ticks (0.4 s), so expiry tests stay short
MAX_SESSION_TIMEOUT_MS = 60_000  # and as long as a loaded machine needs (ZooKeeper's default cap is 20 ticks)


def pyspark_jars() -> str:
    """The classpath glob of pyspark's bundled jars (zookeeper-3.9.x and its logging deps)."""
    import pyspark

    return os.path.join(os.path.dirname(pyspark.__file__), "jars", "*")


class ZooKeeperServer:
    """One standalone ZooKeeper JVM on 127.0.0.1:`port`, data and logs in `root`."""

    def __init__(self, root: str | None = None, port: int | None = None,
                 max_session_timeout_ms: int = MAX_SESSION_TIMEOUT_MS) -> None:
        self.root = root or tempfile.mkdtemp(prefix="fabric-zk-")
        self.port = port or free_port()
        self.max_session_timeout_ms = max_session_timeout_ms
        self.hosts = f"127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None
        self._write_config()

    def _write_config(self) -> None:
        os.makedirs(os.path.join(self.root, "data"), exist_ok=True)
        with open(os.path.join(self.root, "zoo.cfg"), "w") as cfg:
            cfg.write(f"tickTime={TICK_MS}\ndataDir={self.root}/data\nclientPort={self.port}\n"
                      "clientPortAddress=127.0.0.1\nadmin.enableServer=false\nmaxClientCnxns=0\n"
                      f"maxSessionTimeout={self.max_session_timeout_ms}\n")

    def url(self, chroot: str = "") -> str:
        """The zk:// URL of this server, optionally with a chroot path."""
        return f"zk://{self.hosts}{chroot}"

    def start(self, timeout: float = 60.0) -> ZooKeeperServer:
        """Start the JVM and return once a client can open a session (or raise after `timeout` s)."""
        if shutil.which("java") is None:
            raise RuntimeError("java is not on PATH; install a JDK (17) to run the ZooKeeper tests")
        log = open(os.path.join(self.root, "zookeeper.log"), "ab")
        self.process = subprocess.Popen(
            ["java", "-Xmx256m", "-Dzookeeper.admin.enableServer=false", "-cp", pyspark_jars(),
             "org.apache.zookeeper.server.ZooKeeperServerMain", os.path.join(self.root, "zoo.cfg")],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        self._wait_ready(time.monotonic() + timeout)
        return self

    def _wait_ready(self, deadline: float) -> None:
        while True:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.process.returncode}; "
                                   f"see {self.root}/zookeeper.log")
            client = KazooClient(hosts=self.hosts, timeout=2.0)
            try:
                client.start(timeout=min(5.0, max(0.5, deadline - time.monotonic())))
                client.stop()
                return
            except KazooTimeoutError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"ZooKeeper on {self.hosts} did not accept sessions in time; "
                                       f"see {self.root}/zookeeper.log") from None
            finally:
                client.close()

    def _halt(self, sig: int) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            os.killpg(self.process.pid, sig)
        self.process.wait(timeout=30)
        self.process = None

    def stop(self) -> None:
        """Stop the server gracefully (SIGTERM); sessions stay recorded in its data for a restart."""
        self._halt(signal.SIGTERM)

    def kill(self) -> None:
        """Kill the server at once (SIGKILL), as a crash would."""
        self._halt(signal.SIGKILL)

    def close(self) -> None:
        """Stop the server and delete its data."""
        self.kill()
        shutil.rmtree(self.root, ignore_errors=True)
