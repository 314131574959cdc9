"""Real coordinator instances as `python -m fabric.server.service` subprocesses on free 127.0.0.1 ports
(tests and benchmarks). `CoordinatorProcess.start()` returns once the instance answers a Flight call;
`kill()` SIGKILLs it, `stop()` terminates it.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pyarrow.flight as flight

from fabric.server import wire
from fabric.server.zookeeper import free_port


class CoordinatorProcess:
    """One coordinator instance serving `data_dir` with metadata in `store` (default: data_dir's SQLite); its
    output goes to coordinator-<port>.log in `log_dir` (default: data_dir)."""

    def __init__(self, data_dir: str, store: str | None = None, port: int | None = None,
                 tls: tuple[str, str] | None = None, extra: tuple[str, ...] = (), log_dir: str | None = None) -> None:
        self.data_dir, self.store, self.tls, self.extra = data_dir, store, tls, extra
        self.port = port or free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.log_path = os.path.join(log_dir or data_dir, f"coordinator-{self.port}.log")
        self.process: subprocess.Popen | None = None

    def url(self, query: str = "") -> str:
        scheme = "fabric+tls" if self.tls else "fabric"
        return f"{scheme}://{self.address}" + (f"?{query}" if query else "")

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "fabric.server.service", "--listen", self.address, "--data", self.data_dir]
        if self.store:
            cmd += ["--store", self.store]
        if self.tls:
            cmd += ["--tls-cert", self.tls[0], "--tls-key", self.tls[1]]
        return cmd + list(self.extra)

    def start(self, timeout: float = 60.0) -> CoordinatorProcess:
        """Start the process; return once it answers (any answer, even 'unauthenticated'), else raise."""
        os.makedirs(self.data_dir, exist_ok=True)
        os.makedirs(os.path.dirname(self.log_path), exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.command(), cwd=self.data_dir, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while not self.answers():
            if self.process.poll() is not None:
                raise RuntimeError(f"coordinator exited with {self.process.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"coordinator did not answer within {timeout} s:\n{self.log()}")
            time.sleep(0.05)  # poll interval of a deadline-bounded wait
        return self

    def answers(self) -> bool:
        """True if the instance answers a status call."""
        kwargs = {}
        if self.tls:
            with open(self.tls[0], "rb") as cert:
                kwargs["tls_root_certs"] = cert.read()
        scheme = "grpc+tls" if self.tls else "grpc+tcp"
        with flight.connect(f"{scheme}://{self.address}", **kwargs) as client:
            try:
                list(client.do_action(wire.action("status"), flight.FlightCallOptions(timeout=2)))
                return True
            except flight.FlightUnauthenticatedError:
                return True
            except flight.FlightError:
                return False

    def log(self) -> str:
        with open(self.log_path, errors="replace") as handle:
            return handle.read()[-4000:]

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send `sig` (default SIGKILL) and reap the process."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, sig)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited within 10 s."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
