"""A real Spark standalone cluster on this machine from pip's pyspark launcher (`$SPARK_HOME/bin/spark-class
org.apache.spark.deploy.master.Master` / `...worker.Worker`; pip's pyspark has no sbin/ scripts): a master on
127.0.0.1 and one worker per entry of `hosts`, each on that loopback address, so that workers given addresses of
their own run executors on hosts of their own as Spark's scheduler sees them (locality). The benchmarks use it as
it is; the tests' SparkCluster (tests/spark_cluster.py) adds jobs and executors to it.

`start()` returns once the master's JSON (http://127.0.0.1:<webui>/json/) lists every worker ALIVE, waiting as
long as a daemon writes its log (STALL_S at most without a change), so a loaded machine slows it down but does
not fail it; `stop()` ends the daemons and everything they started (executors, their Python workers), by process
group: SIGTERM, then SIGKILL of whatever is left. Every daemon gets SPARK_LOCAL_IP and PYSPARK_PYTHON (this
interpreter): Spark's Python workers cannot connect back in sandboxes without them; and the JVM options of
$SPARK_SUBMIT_OPTS.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any, Callable, Mapping, Sequence, TypeVar, cast

from fabric.common.ports import free_port
from fabric.common.waiting import files_progress, wait_progressing

T = TypeVar("T")
STOP_GRACE_S = 15.0  # SIGTERM to SIGKILL
STALL_S = 240.0  # no log of the cluster (nor a file a wait names) written for this long: stuck, not slow


class StandaloneSpark:
    """A Spark standalone master and a worker per host of `hosts` (each `cores` cores and `memory`) as real JVMs
    under `root` (worker N's work directory, with its executors' logs, is root/workerN; daemon logs are
    root/*.log). `worker_env[i]` is added to worker i+1's environment, which its executors inherit (e.g. a
    FABRIC_CLIENT_RACK per worker). A context manager: started on the way in, stopped on the way out."""

    def __init__(self, root: str | os.PathLike[str], hosts: Sequence[str] = ("127.0.0.1", "127.0.0.1"),
                 cores: int = 1, memory: str = "1g", python: str = sys.executable,
                 worker_env: Sequence[Mapping[str, str]] = ()) -> None:
        import pyspark  # (imported where a cluster is made: the package's other users need no Spark)

        self.root = Path(root)
        self.hosts, self.cores, self.memory, self.python = tuple(hosts), cores, memory, python
        self.worker_env = list(worker_env)
        self.spark_home = os.path.dirname(os.path.abspath(pyspark.__file__))
        self.port, self.webui_port = free_port(), free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self.master_ui = f"http://127.0.0.1:{self.webui_port}"
        self.daemons: list[subprocess.Popen] = []
        self.logs: dict[int, Path] = {}  # pid of a daemon (or of a subclass's job) -> its log

    # -- the daemons -----------------------------------------------------------------------------------------
    def env(self, extra: Mapping[str, str] | None = None, host: str = "127.0.0.1") -> dict[str, str]:
        """The environment of the daemons (and jobs): this one without its FABRIC_* variables (executors see only
        what they are given), with SPARK_HOME, SPARK_LOCAL_IP=`host`, PYSPARK_PYTHON / PYSPARK_DRIVER_PYTHON set
        to `python` and the daemons' JVM options those of the jobs, plus `extra`."""
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("FABRIC_")}
        return {**inherited, "SPARK_HOME": self.spark_home, "SPARK_LOCAL_IP": host,
                "PYSPARK_PYTHON": self.python, "PYSPARK_DRIVER_PYTHON": self.python,
                "SPARK_DAEMON_JAVA_OPTS": os.environ.get("SPARK_SUBMIT_OPTS", ""), **(extra or {})}

    def _spawn(self, name: str, command: list[str], env: Mapping[str, str]) -> subprocess.Popen:
        """`command` in a process group of its own (stop() ends the group), output to root/<name>.log."""
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / f"{name}.log"
        with open(path, "ab") as log:
            process = subprocess.Popen(command, cwd=self.root, env=dict(env), stdout=log, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True)
        self.logs[process.pid] = path
        return process

    def _spark_class(self, cls: str, *args: str) -> list[str]:
        return [os.path.join(self.spark_home, "bin", "spark-class"), cls, *args]

    def start(self) -> StandaloneSpark:
        """Start the master and the workers; return once the master lists every worker ALIVE. On failure
        everything started is stopped and the error names the logs."""
        try:
            self.daemons.append(self._spawn("master", self._spark_class(
                "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(self.port),
                "--webui-port", str(self.webui_port)), self.env()))
            for i, host in enumerate(self.hosts, 1):
                work_dir = self.root / f"worker{i}"
                work_dir.mkdir(parents=True, exist_ok=True)
                extra = self.worker_env[i - 1] if i <= len(self.worker_env) else {}
                self.daemons.append(self._spawn(f"worker{i}", self._spark_class(
                    "org.apache.spark.deploy.worker.Worker", "--host", host, "--cores", str(self.cores),
                    "--memory", self.memory, "--webui-port", str(free_port()), "--work-dir", str(work_dir),
                    self.master_url), self.env(extra, host)))
            self.wait(lambda: len(self.alive_workers()) >= len(self.hosts),
                      f"{len(self.hosts)} workers ALIVE at the master {self.master_url}")
        except BaseException:  # (no __exit__ follows a failed __enter__: the daemons would outlive the run)
            self.stop()
            raise
        return self

    def wait(self, condition: Callable[[], T | None], what: str, *paths: str | os.PathLike[str]) -> T:
        """condition()'s first truthy answer, waited for as long as the cluster's logs or the files under `paths`
        change (STALL_S at most without a change); failing at once (with the logs) if a daemon exited."""
        def check() -> T | None:
            dead = [p for p in self.daemons if p.poll() is not None]
            if dead:
                raise RuntimeError(f"a Spark daemon exited ({self.logs[dead[0].pid].stem}, code "
                                   f"{dead[0].returncode}) while waiting for {what}:\n{self.output(dead[0])}")
            return condition()
        try:
            return cast(T, wait_progressing(check, lambda: files_progress(self.root, *paths), STALL_S, what))
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}\n{self.describe_logs()}") from None

    def stop(self) -> None:
        """End every daemon with its process group (executors and Python workers are in their worker's)."""
        self._end(list(reversed(self.daemons)))
        self.daemons = []

    def _end(self, processes: list[subprocess.Popen]) -> None:
        """SIGTERM each process group, wait up to STOP_GRACE_S, then SIGKILL whatever is left of each."""
        for process in processes:
            self._signal_group(process, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for process in processes:
            try:
                process.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                pass
            self._signal_group(process, signal.SIGKILL)  # children left behind, or the leader itself
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass

    @staticmethod
    def _signal_group(process: subprocess.Popen, sig: int) -> None:
        try:
            os.killpg(process.pid, sig)  # the group this process leads (start_new_session)
        except (ProcessLookupError, PermissionError):
            pass

    def __enter__(self) -> StandaloneSpark:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()

    # -- the master's view -----------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """The master's JSON state (workers, activeapps, completedapps, ...); {} while it does not answer (or, as
        it starts, answers an empty page)."""
        try:
            with urllib.request.urlopen(f"{self.master_ui}/json/", timeout=10) as answer:
                return dict(json.loads(answer.read()))
        except (urllib.error.URLError, OSError, ValueError):
            return {}

    def alive_workers(self) -> list[dict[str, Any]]:
        return [w for w in self.state().get("workers", []) if w.get("state") == "ALIVE"]

    # -- logs ------------------------------------------------------------------------------------------------
    def output(self, process: subprocess.Popen, limit: int | None = 8000) -> str:
        """What a daemon (or job) wrote (its last `limit` characters)."""
        text = self.logs[process.pid].read_text(errors="replace")
        return text if limit is None else text[-limit:]

    def describe_logs(self) -> str:
        """The tail of every daemon's log, for a failure message."""
        return "\n".join(f"--- {self.logs[p.pid].name}:\n{self.output(p, 3000)}" for p in self.daemons)
