"""Coordinator benchmark: rebalance time of a 10-member group of real consumer processes on a 20-partition topic,
embedded and through the fabric:// service over ZooKeeper (offset commits: bench.offsets_bench)."""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from contextlib import ExitStack, contextmanager
from typing import Any, Iterator

import numpy as np

import fabric
from bench.group_workers import GROUP, TOPIC, Members, wait_for
from bench.report import bar_chart, progress, save, table, timed
from fabric.coordinator.interface import Coordinator
from fabric.server.launcher import CoordinatorProcess
from fabric.server.zookeeper import ZooKeeperServer

MEMBERS, PARTITIONS = 10, 20
SETTLE_TIMEOUT_S = 20.0  # a rebalance not done by then counts as failed


# -- rebalances -----------------------------------------------------------------------------------------
def settle(members: Members, names: list[str], t0: float, timeout: float) -> float:
    """Seconds from wall-clock `t0` until `names` own every partition exactly once: the latest moment one of
    them took up its final assignment (each member stamps its own changes)."""
    statuses = wait_for(lambda: members.exact_cover(names, PARTITIONS), timeout,
                        f"{len(names)} members to cover {PARTITIONS} partitions exactly once")
    assert statuses is not None  # wait_for returns a truthy value
    return max(s["since"] for s in statuses.values()) - t0


def check_stable(coordinator: Coordinator, count: int) -> None:
    """The group is Stable with `count` members whose assignments cover every partition once."""
    def stable() -> bool:
        group = coordinator.describe_group(GROUP)
        owned = sorted(tp for m in group.members for tp in m.assignment)
        return (group.state == "Stable" and len(group.members) == count
                and owned == [(TOPIC, p) for p in range(PARTITIONS)])
    wait_for(stable, 30, f"the coordinator to report the group Stable with {count} members")


def bench_rebalance(label: str, url: str, workdir: str, rounds: int, config: dict[str, Any],
                    count: int = MEMBERS) -> dict[str, Any]:
    """`count` members join together; then `rounds` times one leaves and rejoins; then one is SIGKILLed."""
    fab = fabric.connect(url)
    fab.create_topic(TOPIC, partitions=PARTITIONS)
    coordinator = fab.cluster.coordinator
    names = [f"m{i}" for i in range(count)]
    members = Members(url, workdir, config)
    timeout = SETTLE_TIMEOUT_S + config["session_timeout_ms"] / 1000
    out: dict[str, Any] = {"leave_s": [], "join_10th_s": []}
    try:
        with timed(f"rebalance, {label}: start {count} member processes"):
            members.start(names)
        members.command(names, "join")
        wait_for(lambda: all(members.status(n).get("joined_at") for n in names), 30, "members to join")
        last_join = max(members.status(n)["joined_at"] for n in names)
        out["join_together_s"] = settle(members, names, last_join, timeout)
        check_stable(coordinator, count)
        progress(f"  {count} members joining together: stable {out['join_together_s']:.3f} s after the last join")
        rest, mover = names[:-1], names[-1]
        for r in range(rounds):
            members.command([mover], "leave")
            wait_for(lambda: not members.status(mover).get("joined"), 30, f"{mover} to leave")
            out["leave_s"].append(settle(members, rest, members.status(mover)["leave_at"], timeout))
            check_stable(coordinator, count - 1)
            members.command([mover], "join")
            wait_for(lambda: members.status(mover).get("joined"), 30, f"{mover} to rejoin")
            out["join_10th_s"].append(settle(members, names, members.status(mover)["joined_at"], timeout))
            check_stable(coordinator, count)
            progress(f"  round {r + 1}: one leaves -> {out['leave_s'][-1]:.3f} s, "
                     f"10th joins -> {out['join_10th_s'][-1]:.3f} s")
        victim, survivors = names[0], names[1:]
        killed_at = time.time()
        members.kill(victim)
        out["kill_s"] = settle(members, survivors, killed_at, timeout)
        check_stable(coordinator, count - 1)
        progress(f"  SIGKILL of one member -> {out['kill_s']:.3f} s "
                 f"(session_timeout_ms={config['session_timeout_ms']})")
    except TimeoutError as exc:  # a group that never stabilises is a result too: record it, go on
        group = coordinator.describe_group(GROUP)
        out["error"] = (f"{exc}; the group was then {group.state}, generation {group.generation}, "
                        f"{len(group.members)} members, assigned {[len(m.assignment) for m in group.members]}")
        progress(f"  FAILED: {out['error']}")
        return out
    finally:
        members.close()
        fab.close()
    out["leave_median_s"], out["join_10th_median_s"] = (float(np.median(out[k])) for k in ("leave_s", "join_10th_s"))
    return out


# -- setup ----------------------------------------------------------------------------------------------
@contextmanager
def started(process: CoordinatorProcess) -> Iterator[CoordinatorProcess]:
    """A coordinator process, running for the block."""
    progress(f"starting coordinator service on {process.address} (store: {process.store or 'SQLite'})")
    process.start()
    try:
        yield process
    finally:
        process.stop()


CASES = ("rebalance-embedded", "rebalance-zk")


def run(rounds: int, config: dict[str, Any], directory: str, cases: tuple[str, ...] = CASES,
        members: int = MEMBERS) -> dict[str, Any]:
    """Start ZooKeeper and a coordinator service over it, then run the measurements named in `cases`."""
    with ExitStack() as stack:
        with timed("starting ZooKeeper (pyspark's jar)"):
            zk = ZooKeeperServer(root=os.path.join(directory, "zk")).start()
        stack.callback(zk.close)
        svc_zk = stack.enter_context(started(CoordinatorProcess(os.path.join(directory, "svc-zk"),
                                                                store=zk.url("/svc"))))
        rebalance = {}
        if "rebalance-embedded" in cases:
            rebalance["embedded (file://, SQLite)"] = bench_rebalance(
                "embedded", os.path.join(directory, "rebalance-data"), os.path.join(directory, "members-embedded"),
                rounds, config, members)
        if "rebalance-zk" in cases:
            rebalance["fabric:// service, ZooKeeper"] = bench_rebalance(
                "service over ZooKeeper", svc_zk.url(), os.path.join(directory, "members-zk"), rounds, config,
                members)
    return {"rounds": rounds, "members": members, "partitions": PARTITIONS, "member_config": config,
            "rebalance": rebalance}


def report(results: dict[str, Any], name: str = "coordinator") -> None:
    """The plot (bench/results/<name>.png) and the Markdown table."""
    rebalance, members = results["rebalance"], results["members"]
    timings = [(f"{label}: {what}", r[key] * 1000) for label, r in rebalance.items()
               for what, key in ((f"{members} join together", "join_together_s"), ("1 leaves", "leave_median_s"),
                                 ("10th joins", "join_10th_median_s"), ("1 SIGKILLed", "kill_s")) if key in r]
    chart = bar_chart(name, f"Rebalance of {members} consumer processes, {PARTITIONS} partitions (median)", timings,
                      "ms") if timings else "none"
    print(table([(label, *(f"{r[k]:.3f}" if k in r else "failed" for k in
                           ("join_together_s", "leave_median_s", "join_10th_median_s", "kill_s")))
                 for label, r in rebalance.items()],
                ("coordinator", f"{members} join together, s", "1 leaves, s (median)", "10th joins, s (median)",
                 f"1 SIGKILLed, s (session {results['member_config']['session_timeout_ms']} ms)")))
    for label, r in rebalance.items():
        if "error" in r:
            print(f"\n{label}: {r['error']}")
    progress(f"plot: {chart}")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3, help="leave/rejoin rounds per rebalance backend")
    parser.add_argument("--members", type=int, default=MEMBERS, help="consumer processes of the group")
    parser.add_argument("--session-ms", type=int, default=3000, help="members' session_timeout_ms")
    parser.add_argument("--heartbeat-ms", type=int, default=250, help="members' heartbeat_interval_ms")
    parser.add_argument("--only", choices=CASES, action="append", default=None,
                        help="run only this case (repeatable; default: all of them)")
    parser.add_argument("--dir", default=None, help="scratch directory (default: a temp dir, removed after)")
    args = parser.parse_args(argv)
    if args.rounds < 1 or not 2 <= args.members <= PARTITIONS:
        parser.error(f"--rounds must be at least 1 and --members from 2 to {PARTITIONS}")
    config = {"session_timeout_ms": args.session_ms, "heartbeat_interval_ms": args.heartbeat_ms}
    directory = args.dir or tempfile.mkdtemp(prefix="fabric-bench-coordinator-")
    os.makedirs(directory, exist_ok=True)
    try:
        results = run(args.rounds, config, directory, tuple(args.only or CASES), args.members)
    finally:
        if args.dir is None:
            shutil.rmtree(directory, ignore_errors=True)
    name = "coordinator" if args.only is None else "coordinator-" + "-".join(sorted(set(args.only)))
    save(name, results)  # a partial run never overwrites the full run's results
    report(results, name)
    return results


if __name__ == "__main__":
    main()
