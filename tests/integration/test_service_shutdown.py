"""SIGTERM and Ctrl-C stop a coordinator instance within its shutdown timeout (coordinator.shutdown.timeout.ms),
releasing what it holds, even when its ZooKeeper was SIGKILLed first or never answered; with ZooKeeper alive
it resigns at once, so a standby takes over without waiting for the session to expire."""
from __future__ import annotations

import signal
import subprocess
import time

import pytest

import fabric
from fabric.common.waiting import wait_for
from fabric.server.launcher import CoordinatorProcess

SHUTDOWN_MS = 3000
SLACK_S = 5.0  # process start-up and teardown on a loaded machine, beyond the configured timeout


def config(tmp_path, store: str, session_ms: int = 20000) -> str:
    path = tmp_path / "stop.properties"
    path.write_text(f"coordinator.store={store}\nzookeeper.session.timeout.ms={session_ms}\n"
                    f"coordinator.shutdown.timeout.ms={SHUTDOWN_MS}\n")
    return str(path)


def stopped_within(process: subprocess.Popen, sig: int) -> float:
    """Send `sig`; seconds until the process exited (fails past the timeout plus slack)."""
    sent = time.monotonic()
    process.send_signal(sig)
    try:
        process.wait(SHUTDOWN_MS / 1000 + SLACK_S)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail(f"still running {SHUTDOWN_MS / 1000 + SLACK_S:g} s after {signal.Signals(sig).name}")
    return time.monotonic() - sent


@pytest.mark.zookeeper
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_a_coordinator_whose_zookeeper_was_killed_stops_in_time(own_zookeeper, coordinators, tmp_path, sig) -> None:
    instance = coordinators(str(tmp_path / "data"), extra=("--config", config(tmp_path, own_zookeeper.url("/f"))))
    with fabric.connect(instance.url()) as fab:
        wait_for(lambda: fab.cluster.statuses()[instance.address].active, 30, "the instance to be active")
        fab.create_topic("t")
    own_zookeeper.kill()
    wait_for(lambda: "Connection refused" in instance.log() or "Connection dropped" in instance.log(), 30,
             "the instance to notice ZooKeeper is gone")
    stopped_within(instance.process, sig)
    assert f"stopping within {SHUTDOWN_MS / 1000:g} s" in instance.log()


@pytest.mark.zookeeper
def test_ctrl_c_while_connecting_to_an_unreachable_zookeeper_stops_in_time(own_zookeeper, tmp_path) -> None:
    own_zookeeper.kill()  # the instance starts against a ZooKeeper that never answers
    instance = CoordinatorProcess(str(tmp_path / "data"), extra=("--config", config(tmp_path, own_zookeeper.url())),
                                  log_dir=str(tmp_path))
    with open(instance.log_path, "ab") as log:
        process = subprocess.Popen(instance.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    wait_for(lambda: "Connecting to" in instance.log(), 30, "the instance to try ZooKeeper")
    stopped_within(process, signal.SIGINT)
    assert "Traceback" not in instance.log()


@pytest.mark.zookeeper
def test_a_stopping_active_instance_resigns_so_a_standby_takes_over_at_once(zookeeper_instances, the_active) -> None:
    instances, url = zookeeper_instances(60_000, count=2)  # a session expiry would take a minute
    with fabric.connect(url) as fab:
        first = wait_for(lambda: the_active(fab), 30, "one active instance")
        assert stopped_within(instances[first.instance].process, signal.SIGTERM) < SHUTDOWN_MS / 1000 + SLACK_S
        second = wait_for(lambda: (s := the_active(fab)) and s.instance != first.instance and s, 20,
                          "the standby to take over well before the 60 s session expires")
        assert second.epoch > first.epoch
        fab.create_topic("after")  # the new active instance serves writes
