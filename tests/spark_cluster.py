"""SparkCluster: a real Spark standalone cluster on 127.0.0.1 (one master, `workers` workers), started with pip's
pyspark launcher (`$SPARK_HOME/bin/spark-class org.apache.spark.deploy.master.Master` / `...worker.Worker`; pip's
pyspark has no sbin/ scripts), for tests whose Spark tasks must run in executors of their own, apart from the
driver: what a job needs there has to reach them through options, confs or the environment.

- `start()` returns once the master's JSON (http://127.0.0.1:<webui>/json/) lists every worker ALIVE; `stop()`
  ends the daemons and everything they started (executors, their Python workers) and every job `submit` started,
  by process group: SIGTERM, then SIGKILL of whatever is left.
- `submit(script, *args, conf=..., env=...)` runs `spark-submit --master spark://... script args` (client mode:
  the driver is the spark-submit process) and returns its Popen; `supervise(...)` does the same and submits it
  again when it died starved (a Python worker it started did not connect back within Spark's fixed 10 s, which a
  CPU-starved machine causes: SupervisedJob); `run(...)` supervises one and waits for it, returning its output,
  failing with the output if it did not succeed.
- `executor_pids(app_id=None)`: the executor JVMs of this cluster's workers (from /proc); `kill_executor(pid=None,
  app_id=None)` SIGKILLs one and waits until it is gone; `apps()` / `wait_for_app(name)` /
  `wait_for_executors(count)` wait on the master's view and on /proc; `end_jobs()` ends every job still running.
- `wait(condition, what, *paths)`: every wait here follows progress, not a wall clock: it lasts as long as a
  daemon, job or executor of the cluster writes its log (or a file under `paths` changes: a checkpoint, an
  output), and fails once none has for STALL_S, so a loaded machine slows a test down but does not fail it.

Every daemon, driver and executor gets SPARK_LOCAL_IP=127.0.0.1 and PYSPARK_PYTHON (this venv's python): Spark's
Python workers cannot connect back in sandboxes without them. They run with the JVM options of
$SPARK_SUBMIT_OPTS (tests/conftest.py sets the tests' own). This is a plain module of tests/ (no package),
loaded by tests/conftest.py's `plain_module`; it imports only the installed packages.
"""
from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, TypeVar

import pyspark

from fabric.common.waiting import files_progress, wait_progressing
from fabric.server.ports import free_port

T = TypeVar("T")
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
STOP_GRACE_S = 15.0  # SIGTERM to SIGKILL
STALL_S = 240.0  # no log of the cluster (nor a file a wait names) written for this long: stuck, not slow
# How a job dies when a Python worker it starts does not connect back within PythonWorkerFactory's fixed 10 s
STARVED = "Python worker failed to connect back"
RESTARTS = 3  # starved deaths a supervised job is submitted again after


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:  # exited meanwhile, or not ours to read
        return []


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


class SparkCluster:
    """A Spark standalone master and `workers` workers (each `cores` cores and `memory`) as real JVMs under `root`
    (worker N's work directory, with its executors' logs, is root/workerN; daemon and job logs are root/*.log).
    `worker_env[i]` is added to worker i+1's environment, which its executors inherit (e.g. a FABRIC_CLIENT_RACK
    per worker)."""

    STALL_S = STALL_S

    def __init__(self, root: str | os.PathLike[str], workers: int = 2, cores: int = 1, memory: str = "1g",
                 python: str = sys.executable, worker_env: Sequence[Mapping[str, str]] = ()) -> None:
        self.root = Path(root)
        self.workers, self.cores, self.memory, self.python = workers, cores, memory, python
        self.worker_env = list(worker_env)
        self.spark_home = os.path.dirname(os.path.abspath(pyspark.__file__))
        self.port, self.webui_port = free_port(), free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self.master_ui = f"http://127.0.0.1:{self.webui_port}"
        self.daemons: list[subprocess.Popen] = []
        self.jobs: list[subprocess.Popen] = []
        self.logs: dict[int, Path] = {}  # pid of a daemon or job -> its log
        self._count = itertools.count(1)

    # -- the daemons -----------------------------------------------------------------------------------------
    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment of the daemons and jobs: this one without its FABRIC_* variables (executors see only
        what a test gives them), with SPARK_HOME, SPARK_LOCAL_IP=127.0.0.1, PYSPARK_PYTHON /
        PYSPARK_DRIVER_PYTHON set to `python` and the daemons' JVM options those of the jobs, plus `extra`."""
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("FABRIC_")}
        return {**inherited, "SPARK_HOME": self.spark_home, "SPARK_LOCAL_IP": "127.0.0.1",
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

    def start(self) -> SparkCluster:
        """Start the master and the workers; return once the master lists `workers` workers ALIVE. On failure
        everything started is stopped and the error names the logs."""
        try:
            self.daemons.append(self._spawn("master", self._spark_class(
                "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(self.port),
                "--webui-port", str(self.webui_port)), self.env()))
            for i in range(1, self.workers + 1):
                work_dir = self.root / f"worker{i}"
                work_dir.mkdir(parents=True, exist_ok=True)
                extra = self.worker_env[i - 1] if i <= len(self.worker_env) else {}
                self.daemons.append(self._spawn(f"worker{i}", self._spark_class(
                    "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", str(self.cores),
                    "--memory", self.memory, "--webui-port", str(free_port()), "--work-dir", str(work_dir),
                    self.master_url), self.env(extra)))
            self.wait(lambda: len(self.alive_workers()) >= self.workers,
                      f"{self.workers} workers ALIVE at the master {self.master_url}")
        except BaseException:
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
            return wait_progressing(check, lambda: files_progress(self.root, *paths), STALL_S, what)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}\n{self.describe_logs()}") from None

    def stop(self) -> None:
        """End every job and daemon with its process group (executors and Python workers are in their worker's):
        SIGTERM, wait up to STOP_GRACE_S, then SIGKILL whatever is left of each group."""
        self._end([*self.jobs, *reversed(self.daemons)])
        self.jobs, self.daemons = [], []

    def end_jobs(self) -> None:
        """End every job submit() started that still runs, as stop() does (a test's jobs end with the test)."""
        self._end([job for job in self.jobs if job.poll() is None])
        self.jobs = []

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

    # -- the master's view -----------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """The master's JSON state (workers, activeapps, completedapps, ...); {} while it does not answer."""
        try:
            with urllib.request.urlopen(f"{self.master_ui}/json/", timeout=10) as answer:
                return json.loads(answer.read())
        except (urllib.error.URLError, OSError, ValueError):
            return {}

    def alive_workers(self) -> list[dict[str, Any]]:
        return [w for w in self.state().get("workers", []) if w.get("state") == "ALIVE"]

    def apps(self, completed: bool = False) -> list[dict[str, Any]]:
        """The master's running applications (or its completed ones): id, name, state, cores, ..."""
        return list(self.state().get("completedapps" if completed else "activeapps", []))

    def wait_for_app(self, name: str | None = None) -> dict[str, Any]:
        """A running application (named `name`, if given: the script's appName(...), else submit's `name`), once
        the master lists it."""
        def running() -> dict[str, Any] | None:
            return next((a for a in self.apps() if name is None or a.get("name") == name), None)
        return self.wait(running, f"a running application{f' {name!r}' if name else ''} at {self.master_url}")

    # -- executors ---------------------------------------------------------------------------------------------
    def executor_pids(self, app_id: str | None = None) -> list[int]:
        """The executor JVMs this cluster's workers run now (of application `app_id`, if given), found in /proc:
        processes running CoarseGrainedExecutorBackend that descend from one of the workers."""
        workers = {p.pid for p in self.daemons[1:] if p.poll() is None}
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            args = _cmdline(int(entry))
            if EXECUTOR_CLASS not in args:
                continue
            if app_id is not None and args[args.index("--app-id") + 1:][:1] != [app_id]:
                continue
            pid = ancestor = int(entry)
            while ancestor > 1 and ancestor not in workers:
                ancestor = _parent(ancestor)
            if ancestor in workers:
                found.append(pid)
        return sorted(found)

    def wait_for_executors(self, count: int = 1, app_id: str | None = None) -> list[int]:
        """executor_pids(app_id) once there are at least `count`."""
        return self.wait(lambda: (pids if len(pids := self.executor_pids(app_id)) >= count else None),
                         f"{count} executor JVM(s){f' of {app_id}' if app_id else ''}")

    def kill_executor(self, pid: int | None = None, app_id: str | None = None, sig: int = signal.SIGKILL) -> int:
        """Send `sig` (default SIGKILL: an executor lost with its Python workers' state) to executor `pid`, or to
        the first of executor_pids(app_id); return its pid once it is gone (its worker reaps it and tells the
        master, which starts another for the application)."""
        if pid is None:
            pid = self.wait_for_executors(1, app_id)[0]
        os.kill(pid, sig)
        self.wait(lambda: pid not in self.executor_pids(), f"executor {pid} to go")
        return pid

    # -- jobs --------------------------------------------------------------------------------------------------
    def submit(self, script: str | os.PathLike[str], *args: str, conf: Mapping[str, str] | None = None,
               env: Mapping[str, str] | None = None, name: str | None = None) -> subprocess.Popen:
        """Start `spark-submit --master <master_url> --conf k=v... script args` (client mode: this Popen is the
        driver) in a process group of its own, output in root/submit-N.log (see output()); `env` is added to
        the driver's environment (executors get theirs with conf spark.executorEnv.NAME). Loopback addresses, no
        web UI and the venv's python are set unless `conf` says otherwise."""
        confs = {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
                 "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
                 "spark.pyspark.python": self.python, "spark.pyspark.driver.python": self.python,
                 "spark.executor.extraJavaOptions": os.environ.get("SPARK_SUBMIT_OPTS", ""),
                 **({"spark.app.name": name} if name else {}), **(conf or {})}
        command = [os.path.join(self.spark_home, "bin", "spark-submit"), "--master", self.master_url,
                   *itertools.chain.from_iterable(("--conf", f"{k}={v}") for k, v in confs.items()),
                   str(script), *args]
        job = self._spawn(f"submit-{next(self._count)}", command, self.env(env))
        self.jobs.append(job)
        return job

    def supervise(self, script: str | os.PathLike[str], *args: str, conf: Mapping[str, str] | None = None,
                  env: Mapping[str, str] | None = None, name: str | None = None) -> SupervisedJob:
        """submit(...), submitted again whenever it dies starved (see SupervisedJob)."""
        return SupervisedJob(self, lambda: self.submit(script, *args, conf=conf, env=env, name=name))

    def run(self, script: str | os.PathLike[str], *args: str, conf: Mapping[str, str] | None = None,
            env: Mapping[str, str] | None = None, name: str | None = None) -> str:
        """supervise(...) and wait for it (see wait(); a stalled job is killed): its output, or an AssertionError
        with the output if it failed or stalled."""
        supervised = self.supervise(script, *args, conf=conf, env=env, name=name)
        try:
            self.wait(supervised.ended, f"spark-submit {script} to end")
        except TimeoutError as exc:
            self._end([supervised.job])
            raise AssertionError(f"{exc}\n--- spark-submit {script}:\n{self.output(supervised.job)}") from None
        job = supervised.job
        if job.returncode != 0:
            raise AssertionError(f"spark-submit {script} exited with {job.returncode}:\n{self.output(job)}")
        return self.output(job, limit=None)

    def output(self, process: subprocess.Popen, limit: int | None = 8000) -> str:
        """What a job or daemon wrote (its last `limit` characters)."""
        text = self.logs[process.pid].read_text(errors="replace")
        return text if limit is None else text[-limit:]

    def describe_logs(self) -> str:
        """The tail of every daemon's log, for a failure message."""
        return "\n".join(f"--- {self.logs[p.pid].name}:\n{self.output(p, 3000)}" for p in self.daemons)


class SupervisedJob:
    """A spark-submit job submitted again, as a supervisor restarts a query from its checkpoint, whenever it died
    starved: a Python worker it started (the driver's for a Python data source, say) did not connect back within
    PythonWorkerFactory's fixed 10 s, which only a CPU-starved machine causes, not a fault of the job; at most
    RESTARTS times. `job` is the current spark-submit Popen."""

    def __init__(self, cluster: SparkCluster, submit: Callable[[], subprocess.Popen]) -> None:
        self.cluster, self._submit = cluster, submit
        self.job, self.restarts = submit(), 0

    def ended(self) -> bool:
        """Whether the job ended for good; a starved one is submitted again (and runs)."""
        if self.job.poll() is None:
            return False
        if self.job.returncode != 0 and self.restarts < RESTARTS and STARVED in self.cluster.output(self.job, None):
            self.restarts += 1
            self.job = self._submit()
            return False
        return True
