"""Consumer-group members in processes of their own (the `group_workers` fixture's): each runs a script that
consumes, commits and reports its owned partitions and rebalance callbacks in a kill-safe JSON file."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

PYTHON = sys.executable

MEMBER = r"""
import json, os, sys
import fabric
from fabric.common.errors import CommitFailedError

url, workdir, name, group, topic = sys.argv[1:6]
config = json.loads(sys.argv[6])
parent = os.getppid()
status = {"owned": [], "assigned": [], "revoked": [], "consumed": 0, "closed": False}
path = os.path.join(workdir, f"{name}.json")

def save():
    with open(path + ".tmp", "w") as out:
        json.dump(status, out)
    os.replace(path + ".tmp", path)

with fabric.connect(url) as fab:
    consumer = fab.consumer(topic, group_id=group, on_assign=lambda ps: status["assigned"].append(ps),
                            on_revoke=lambda ps: status["revoked"].append(ps), **config)
    while not os.path.exists(os.path.join(workdir, f"{name}.stop")) and os.getppid() == parent:
        records = consumer.poll(0.05)
        if records:
            status["consumed"] += len(records)
            try:
                consumer.commit()
            except CommitFailedError:
                pass  # a rebalance took the partitions: the next owner resumes from the last commit
        owned = [list(tp) for tp in consumer.assignment()]
        if owned != status["owned"] or records:
            status["owned"] = owned
            save()
    consumer.close()
status["owned"], status["closed"] = [], True
save()
"""


class Workers:
    """Member processes of one consumer group consuming one topic, each running `script` (by default MEMBER:
    consume, commit after every poll, report owned partitions and rebalance callbacks in <workdir>/<name>.json,
    kill-safe), and what they report. A script gets argv: url, workdir, name, group, topic, config (JSON); it
    stops once <workdir>/<name>.stop exists."""

    # the members' consumer config unless start() overrides it: quick to notice a dead member, no auto-commit
    FAST = dict(session_timeout_ms=1500, heartbeat_interval_ms=250, auto_offset_reset="earliest",
                enable_auto_commit=False)

    def __init__(self, url: str, workdir: str, group: str, topic: str, script: str = MEMBER) -> None:
        self.url, self.workdir, self.group, self.topic, self.script = url, workdir, group, topic, script
        self.procs: dict[str, subprocess.Popen] = {}
        os.makedirs(workdir, exist_ok=True)

    def start(self, name: str, **config: Any) -> None:
        args = [self.url, self.workdir, name, self.group, self.topic, json.dumps({**self.FAST, **config})]
        with open(os.path.join(self.workdir, f"{name}.log"), "ab") as log:
            self.procs[name] = subprocess.Popen([PYTHON, "-c", self.script, *args], stdin=subprocess.DEVNULL,
                                                stdout=log, stderr=subprocess.STDOUT)

    def status(self, name: str) -> dict[str, Any]:
        try:
            with open(os.path.join(self.workdir, f"{name}.json")) as f:
                return json.load(f)
        except FileNotFoundError:
            return {"owned": [], "assigned": [], "revoked": [], "consumed": 0, "closed": False}

    def owned(self, names: list[str]) -> dict[str, list[tuple[str, int]]]:
        return {n: [tuple(tp) for tp in self.status(n)["owned"]] for n in names}

    def exact_cover(self, names: list[str], partitions: int) -> dict[str, list[tuple[str, int]]] | None:
        """The workers' assignments if together they own every partition exactly once and each owns some."""
        owned = self.owned(names)
        flat = sorted(tp for tps in owned.values() for tp in tps)
        busy = all(owned.values()) if len(names) <= partitions else True
        return owned if flat == [(self.topic, p) for p in range(partitions)] and busy else None

    def produce(self, fab, partitions: int, per_partition: int) -> None:
        """Send `per_partition` records to each partition of the workers' topic."""
        producer = fab.producer()
        for p in range(partitions):
            for i in range(per_partition):
                producer.send(self.topic, b"v%d" % i, partition=p)
        producer.flush()
        producer.close()

    def log(self, name: str) -> str:
        with open(os.path.join(self.workdir, f"{name}.log"), errors="replace") as f:
            return f.read()[-3000:]

    def _wait(self, proc: subprocess.Popen, timeout: float) -> None:
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass  # still running: the caller reports or kills it

    def stop(self, name: str) -> None:
        open(os.path.join(self.workdir, f"{name}.stop"), "w").close()
        self._wait(self.procs[name], 30)
        assert self.procs[name].returncode == 0, self.log(name)

    def kill(self, name: str) -> None:
        """SIGKILL: no leave, no commit."""
        self.procs[name].kill()
        self._wait(self.procs[name], 10)

    def close(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is None:
                open(os.path.join(self.workdir, f"{name}.stop"), "w").close()
        for proc in self.procs.values():
            self._wait(proc, 30)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
