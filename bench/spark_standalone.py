"""A Spark standalone cluster for benchmarks, from pip's pyspark launcher: a master on 127.0.0.1 and one worker
(one core) per loopback address of `hosts`, so each worker's executors run on a host of their own, as Spark's
scheduler sees hosts (the tests' SparkCluster is the same idea; benchmarks do not import tests). A context manager:
every daemon, and the executors they started, is ended on the way out."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from types import TracebackType

import pyspark

from fabric.server.ports import free_port

START_TIMEOUT_S = 120.0  # the workers' registration at the master, on a loaded machine


class StandaloneSpark:
    """A master and one worker per host of `hosts` under `root` (their logs there); `worker_env[i]` is added to the
    environment of worker i + 1, which its executors inherit (a $FABRIC_CLIENT_RACK, say)."""

    def __init__(self, root: str, hosts: tuple[str, ...], memory: str = "1g",
                 worker_env: tuple[dict[str, str], ...] = ()) -> None:
        self.root, self.hosts, self.memory, self.worker_env = root, hosts, memory, worker_env
        self.spark_home = os.path.dirname(os.path.abspath(pyspark.__file__))
        self.port, self.webui_port = free_port(), free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self.daemons: list[subprocess.Popen] = []

    def _spawn(self, name: str, host: str, *args: str, env: dict[str, str] | None = None) -> None:
        env = {**os.environ, "SPARK_HOME": self.spark_home, "SPARK_LOCAL_IP": host,
               "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable, **(env or {})}
        with open(os.path.join(self.root, f"{name}.log"), "ab") as log:
            self.daemons.append(subprocess.Popen([os.path.join(self.spark_home, "bin", "spark-class"), *args],
                                                 cwd=self.root, env=env, stdout=log, stderr=subprocess.STDOUT,
                                                 stdin=subprocess.DEVNULL, start_new_session=True))

    def alive_workers(self) -> list[str]:
        """The hosts of the workers the master lists ALIVE."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.webui_port}/json/", timeout=10) as answer:
            state = json.load(answer)
        return [w["host"] for w in state.get("workers", []) if w.get("state") == "ALIVE"]

    def start(self) -> StandaloneSpark:
        os.makedirs(self.root, exist_ok=True)
        self._spawn("master", "127.0.0.1", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                    "--port", str(self.port), "--webui-port", str(self.webui_port))
        for i, host in enumerate(self.hosts, 1):
            work = os.path.join(self.root, f"worker{i}")
            os.makedirs(work, exist_ok=True)
            self._spawn(f"worker{i}", host, "org.apache.spark.deploy.worker.Worker", "--host", host, "--cores", "1",
                        "--memory", self.memory, "--webui-port", str(free_port()), "--work-dir", work,
                        self.master_url, env=self.worker_env[i - 1] if i <= len(self.worker_env) else None)
        try:
            self._wait_for_workers()
        except BaseException:  # (no __exit__ follows a failed __enter__: the daemons would outlive the run)
            self.stop()
            raise
        return self

    def _wait_for_workers(self) -> None:
        """Until the master lists every worker ALIVE; RuntimeError after START_TIMEOUT_S."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                if sorted(self.alive_workers()) == sorted(self.hosts):
                    return
            except (OSError, ValueError):  # the master's web UI is not up yet, or answers an empty page (no JSON)
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Spark workers did not register at {self.master_url}; logs in {self.root}")
            time.sleep(0.5)  # poll interval of a deadline-bounded wait

    def stop(self) -> None:
        for daemon in self.daemons:
            try:
                os.killpg(daemon.pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
        for daemon in self.daemons:
            try:
                daemon.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(daemon.pid, signal.SIGKILL)
                daemon.wait()
        self.daemons.clear()

    def __enter__(self) -> StandaloneSpark:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()
