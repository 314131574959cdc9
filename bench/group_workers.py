"""Consumer-group member processes for the rebalance benchmark, driven by command files.

Each member is a real OS process (spawned) with a group consumer. The bench writes `<name>.cmd`
("join N", "leave N" or "exit"); the member acts on a new command and reports, in `<name>.json` (replaced
atomically, so a SIGKILL never leaves half a file), the partitions it owns and the wall-clock `time.time()`
at which that assignment began, when it joined and when it started to leave.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import time
from typing import Any

import fabric
from fabric.common.waiting import wait_for

GROUP = "bench-rebalance"
TOPIC = "bench-rebalance"
POLL_INTERVAL_S = 0.02  # the member's poll loop; fetches of its (empty) partitions run at this rate
COMMAND_POLL_S = 0.005


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except FileNotFoundError:
        return ""


def _write(path: str, text: str) -> None:
    with open(path + ".tmp", "w") as out:
        out.write(text)
    os.replace(path + ".tmp", path)


def run_member(url: str, workdir: str, name: str, config: dict[str, Any]) -> None:
    """A member process: join/leave on command, poll while joined, report its assignment on every change."""
    cmd_path, status_path = os.path.join(workdir, f"{name}.cmd"), os.path.join(workdir, f"{name}.json")
    status: dict[str, Any] = {"ready": True, "joined": False, "owned": [], "since": 0.0,
                              "joined_at": 0.0, "leave_at": 0.0}

    def save() -> None:
        _write(status_path, json.dumps(status))

    save()
    with fabric.connect(url) as fab:
        consumer, done = None, ""
        while True:
            command = _read(cmd_path)
            if command == done:
                if consumer is None:
                    time.sleep(COMMAND_POLL_S)
                    continue
                consumer.poll(0)
                owned = [list(tp) for tp in consumer.assignment()]
                if owned != status["owned"]:
                    status["owned"], status["since"] = owned, time.time()
                    save()
                time.sleep(POLL_INTERVAL_S)
                continue
            done = command
            if command.startswith("join") and consumer is None:
                status.update(joined=True, joined_at=time.time(), owned=[], since=time.time())
                save()
                consumer = fab.consumer(TOPIC, group_id=GROUP, **config)
            elif consumer is not None and command.startswith(("leave", "exit")):
                status.update(leave_at=time.time())
                save()
                consumer.close()
                consumer = None
                status.update(joined=False, owned=[], since=time.time())
                save()
            if command == "exit":
                return


class Members:
    """Member processes of one group on `url`, and what they report."""

    def __init__(self, url: str, workdir: str, config: dict[str, Any]) -> None:
        self.url, self.workdir, self.config = url, workdir, config
        self.procs: dict[str, multiprocessing.process.BaseProcess] = {}
        self._seq = 0
        os.makedirs(workdir, exist_ok=True)

    def start(self, names: list[str], timeout: float = 120.0) -> None:
        """Spawn idle members and wait until each has connected."""
        ctx = multiprocessing.get_context("spawn")
        for name in names:
            proc = ctx.Process(target=run_member, args=(self.url, self.workdir, name, self.config), daemon=True)
            proc.start()
            self.procs[name] = proc
        wait_for(lambda: all(self.status(n).get("ready") for n in names), timeout, f"{len(names)} members to start")

    def command(self, names: list[str], verb: str) -> None:
        """Tell members to `join`, `leave` or `exit` (a fresh sequence number makes it a new command)."""
        self._seq += 1
        for name in names:
            _write(os.path.join(self.workdir, f"{name}.cmd"), f"{verb} {self._seq}" if verb != "exit" else verb)

    def status(self, name: str) -> dict[str, Any]:
        text = _read(os.path.join(self.workdir, f"{name}.json"))
        return json.loads(text) if text else {}

    def exact_cover(self, names: list[str], partitions: int) -> dict[str, dict[str, Any]] | None:
        """The members' statuses if each owns some partition and together they own each exactly once."""
        statuses = {n: self.status(n) for n in names}
        flat = sorted(tuple(tp) for s in statuses.values() for tp in s.get("owned", []))
        busy = all(s.get("owned") for s in statuses.values())
        return statuses if busy and flat == [(TOPIC, p) for p in range(partitions)] else None

    def kill(self, name: str) -> None:
        """SIGKILL the member: no leave, so only its session timeout tells the group."""
        self.procs[name].kill()
        self.procs[name].join(10)

    def close(self) -> None:
        """Ask every live member to exit, then kill whatever has not within 30 s."""
        live = [n for n, p in self.procs.items() if p.is_alive()]
        self.command(live, "exit")
        for proc in self.procs.values():
            proc.join(30)
            if proc.is_alive():
                proc.kill()
                proc.join(10)
