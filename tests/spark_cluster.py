"""SparkCluster: a real Spark standalone cluster on 127.0.0.1 (one master, `workers` workers: fabric.spark.standalone,
which starts, waits on and stops its daemons) for tests whose Spark tasks must run in executors of their own, apart
from the driver: what a job needs there has to reach them through options, confs or the environment.

- `start()` returns once the master lists every worker ALIVE; `stop()` ends the daemons and everything they
  started (executors, their Python workers) and every job `submit` started, by process group: SIGTERM, then
  SIGKILL of whatever is left.
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
import os
import signal
import subprocess
import sys
from typing import Any, Callable, Mapping, Sequence

from fabric.spark.standalone import STALL_S, StandaloneSpark

EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
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


class SparkCluster(StandaloneSpark):
    """A Spark standalone master and `workers` workers on 127.0.0.1 (fabric.spark.standalone: each `cores` cores
    and `memory`, under `root`), plus the jobs a test submits (root/submit-N.log) and the executors its workers
    run. `worker_env[i]` is added to worker i+1's environment (e.g. a FABRIC_CLIENT_RACK per worker)."""

    STALL_S = STALL_S

    def __init__(self, root: str | os.PathLike[str], workers: int = 2, cores: int = 1, memory: str = "1g",
                 python: str = sys.executable, worker_env: Sequence[Mapping[str, str]] = ()) -> None:
        super().__init__(root, ("127.0.0.1",) * workers, cores, memory, python, worker_env)
        self.workers = workers
        self.jobs: list[subprocess.Popen] = []
        self._count = itertools.count(1)

    def stop(self) -> None:
        """End every job and daemon with its process group (executors and Python workers are in their worker's):
        SIGTERM, wait up to STOP_GRACE_S, then SIGKILL whatever is left of each group."""
        self._end([*self.jobs, *reversed(self.daemons)])
        self.jobs, self.daemons = [], []

    def end_jobs(self) -> None:
        """End every job submit() started that still runs, as stop() does (a test's jobs end with the test)."""
        self._end([job for job in self.jobs if job.poll() is None])
        self.jobs = []

    # -- the master's view -----------------------------------------------------------------------------------
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
