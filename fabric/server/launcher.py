"""Real server processes on free ports of 127.0.0.1, or of another loopback address given as `host` (a benchmark
that gives each node a host of its own), for tests, benchmarks and `fabric cluster up`: coordinator
instances (`python -m fabric.server.service`) and data nodes (`python -m fabric.server.node`).
`start()` returns once the process answers a Flight call (a node: once it has registered); `kill()` SIGKILLs
it, `stop()` terminates it. A process's own token goes to it in its environment ($FABRIC_TOKEN), never on its
command line, where every user of the machine could read it.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any

import pyarrow.flight as flight

from fabric.common.ports import free_port
from fabric.server import wire
from fabric.server.connection import ENV_TOKEN

PORT_DRAWS = 3  # ports a launch with a drawn port tries, each taken by another process before it bound it


def taken(host: str, port: int) -> bool:
    """Whether another socket listens on `port` of `host` now (connections of an earlier server there, closing,
    do not count)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


class ServerProcess:
    """One server process serving `data_dir`; its output goes to <kind>-<port>.log in `log_dir` (default:
    data_dir). `token` is the one it presents to its peers (default: this process's $FABRIC_TOKEN, which it
    inherits). Subclasses give `kind` and `command()`."""

    kind = "server"

    def __init__(self, data_dir: str, port: int | None = None, tls: tuple[str, str] | None = None,
                 extra: tuple[str, ...] = (), log_dir: str | None = None, token: str | None = None,
                 host: str = "127.0.0.1") -> None:
        self.data_dir, self.tls, self.extra, self.token = data_dir, tls, extra, token
        self.host, self._log_dir, self._drawn = host, log_dir or data_dir, port is None
        self._use_port(port or free_port())
        self.process: subprocess.Popen | None = None

    def _use_port(self, port: int) -> None:
        self.port = port
        self.address = f"{self.host}:{port}"
        self.log_path = os.path.join(self._log_dir, f"{self.kind}-{port}.log")

    def command(self) -> list[str]:
        raise NotImplementedError

    def _tls_arguments(self) -> list[str]:
        return ["--tls-cert", self.tls[0], "--tls-key", self.tls[1]] if self.tls else []

    def start(self, timeout: float = 60.0) -> Any:
        """Start the process; return self once it is ready (see ready()), else raise with its log. Where the port
        was drawn here (free_port) and another process took it before this one could bind it (a server of another
        test run on the machine), it is started again on another, up to PORT_DRAWS times."""
        os.makedirs(self.data_dir, exist_ok=True)
        deadline = time.monotonic() + timeout
        for draw in range(PORT_DRAWS):
            if draw:
                self._use_port(free_port())
            os.makedirs(os.path.dirname(self.log_path), exist_ok=True)
            process = self.process = self._launch()
            while not self.ready():
                if process.poll() is not None:
                    break
                if time.monotonic() > deadline:
                    self.kill()
                    raise RuntimeError(f"{self.kind} did not answer within {timeout} s:\n{self.log()}")
                time.sleep(0.05)  # poll interval of a deadline-bounded wait
            else:
                return self
            if not (self._drawn and taken(self.host, self.port)):
                break
        raise RuntimeError(f"{self.kind} exited with {process.returncode}:\n{self.log()}")

    def _launch(self) -> subprocess.Popen:
        env = {**os.environ, ENV_TOKEN: self.token} if self.token else None
        with open(self.log_path, "ab") as log:
            return subprocess.Popen(self.command(), cwd=self.data_dir, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True, env=env)

    def status(self, token: str | None = None) -> Any:
        """The process's `status` answer, asked with `token` if given; a FlightError if it does not give one."""
        kwargs = {}
        if self.tls:
            with open(self.tls[0], "rb") as cert:
                kwargs["tls_root_certs"] = cert.read()
        scheme = "grpc+tls" if self.tls else "grpc+tcp"
        headers = [(wire.AUTH_HEADER.encode(), f"Bearer {token}".encode())] if token else []
        with flight.connect(f"{scheme}://{self.address}", **kwargs) as client:
            return wire.loads(next(iter(client.do_action(wire.action("status"), flight.FlightCallOptions(
                timeout=2, headers=headers)))).body)

    def answers(self) -> bool:
        """True if the process answers a status call (even 'unauthenticated'), it and not another listening on
        its address."""
        try:
            return self.ours(self.status())
        except flight.FlightUnauthenticatedError:
            return True
        except flight.FlightError:
            return False

    def ready(self) -> bool:
        return self.answers()

    def ours(self, status: Any) -> bool:
        """Whether a status answer came from this object's process: another server may listen on its port (one
        that took it first, where this one could not bind it)."""
        pid = status.get("pid") if isinstance(status, dict) else getattr(status, "pid", None)
        return self.process is not None and pid == self.process.pid

    def log(self) -> str:
        with open(self.log_path, errors="replace") as handle:
            return handle.read()[-4000:]

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send `sig` (default SIGKILL) and reap the process."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, sig)
            self.process.wait(timeout=30)

    def pause(self, timeout: float = 60.0) -> None:
        """SIGSTOP: the process is frozen (a stalled machine, a long GC pause) until resume(). Returns once every
        thread is stopped (where /proc shows it): a process stops only when one of its threads runs to take the
        signal, which on a loaded machine may be after kill() returned, time enough to serve a request."""
        if self.process is None or self.process.poll() is not None:
            return
        os.kill(self.process.pid, signal.SIGSTOP)
        deadline = time.monotonic() + timeout
        while not self._stopped() and time.monotonic() < deadline:
            time.sleep(0.005)

    def _stopped(self) -> bool:
        """Whether every thread of the process is stopped ("T" in /proc/<pid>/task/<tid>/stat; True where there
        is no /proc to ask)."""
        assert self.process is not None
        tasks = f"/proc/{self.process.pid}/task"
        if not os.path.isdir(tasks):
            return True
        states = []
        for tid in os.listdir(tasks):
            try:
                with open(f"{tasks}/{tid}/stat") as stat:
                    states.append(stat.read().rpartition(")")[2].split()[0])
            except FileNotFoundError:
                continue  # the thread exited meanwhile
        return all(state == "T" for state in states)

    def resume(self) -> None:
        """SIGCONT after pause()."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited within 10 s (a paused process is resumed first)."""
        if self.process is None or self.process.poll() is not None:
            return
        self.resume()
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()


class CoordinatorProcess(ServerProcess):
    """One coordinator instance serving `data_dir` with metadata in `store` (default: data_dir's SQLite)."""

    kind = "coordinator"

    def __init__(self, data_dir: str, store: str | None = None, port: int | None = None,
                 tls: tuple[str, str] | None = None, extra: tuple[str, ...] = (), log_dir: str | None = None,
                 token: str | None = None) -> None:
        super().__init__(data_dir, port, tls, extra, log_dir, token)
        self.store = store

    def url(self, query: str = "") -> str:
        scheme = "fabric+tls" if self.tls else "fabric"
        return f"{scheme}://{self.address}" + (f"?{query}" if query else "")

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "fabric.server.service", "--listen", self.address, "--data", self.data_dir]
        if self.store:
            cmd += ["--store", self.store]
        return cmd + self._tls_arguments() + list(self.extra)


class NodeProcess(ServerProcess):
    """Data node `node_id` serving `data_dir`, registered with the coordinator at `coordinator` (a fabric://
    URL without ?token=: the node refuses one on its command line); ready once it has registered."""

    kind = "node"

    def __init__(self, node_id: int, data_dir: str, coordinator: str, port: int | None = None,
                 tls: tuple[str, str] | None = None, extra: tuple[str, ...] = (), log_dir: str | None = None,
                 token: str | None = None, host: str = "127.0.0.1") -> None:
        super().__init__(data_dir, port, tls, extra, log_dir, token, host)
        self.node_id, self.coordinator = node_id, coordinator

    def command(self) -> list[str]:
        return [sys.executable, "-m", "fabric.server.node", "--id", str(self.node_id), "--listen", self.address,
                "--data", self.data_dir, "--coordinator", self.coordinator, *self._tls_arguments(), *self.extra]

    def restarted(self) -> NodeProcess:
        """Stop this process and start the node again with all its settings (id, directories, port, coordinator,
        options, host, token, TLS); the new one once registered, or stopped too if its start fails or is interrupted.
        A port drawn here may have been drawn by another process while the node was down (a server of another
        test run on the machine: a CI run failed on it); the node then starts on another, as a first start does."""
        self.stop()
        again = NodeProcess(self.node_id, self.data_dir, self.coordinator, port=self.port, tls=self.tls,
                            extra=self.extra, log_dir=self._log_dir, token=self.token, host=self.host)
        again._drawn = self._drawn
        try:
            return again.start()
        except BaseException:  # e.g. Ctrl-C while it registers: the caller holds only this object, not `again`
            again.stop()
            raise

    def ready(self) -> bool:
        """True once the node answers with a node epoch (it has registered). A node requiring tokens is asked with
        its own token; without one, its refusal is all there is to wait for."""
        token = self.token or os.environ.get(ENV_TOKEN)
        try:
            status = self.status(token)
            return self.ours(status) and status["node_epoch"] > 0
        except flight.FlightUnauthenticatedError:
            return token is None
        except flight.FlightError:
            return False
