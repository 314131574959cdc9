"""Election of the active coordinator instance against a real ZooKeeper: one winner among real processes,
failover after SIGKILL, demotion on session expiry with the old epoch fenced, suspension while the server
is unreachable, and re-election when an operator deletes /controller."""
from __future__ import annotations

import queue
import subprocess
import sys
import threading

import pytest
from kazoo.client import KazooClient, KazooState
from kazoo.handlers.threading import KazooTimeoutError

from fabric.common.errors import StaleControllerEpochError
from fabric.common.types import LeaderAndIsr, PartitionAssignment, PartitionRegistration
from fabric.common.waiting import wait_for
from fabric.coordinator import zk_layout as layout
from fabric.coordinator.election import (
    ControllerElection,
    ElectionState,
    EpochToken,
    FencedError,
    NotControllerError,
    read_controller,
)
from fabric.coordinator.zk_store import ZkCoordinator

pytestmark = pytest.mark.zookeeper
SESSION_S = 2.0  # short sessions make failover quick (the shared test server allows 0.4 s .. 60 s)
# A restarted ZooKeeper server gives the sessions it reloads one session timeout to come back, counted from the
# reload; the client is back only once the JVM has finished starting and the client's reconnect backoff (up to
# 1 s) has passed, and on a loaded machine both take seconds: 60 s, the test server's maximum.
# ZooKeeper 3.9 also leaves a connection that arrives between its bind and its database load hanging (closing it
# as "not running" fails on a NullPointerException in removeCnxn, so the socket stays open, unanswered: seen in
# its log, about once in 200 restarts), and kazoo waits for a handshake's answer session timeout / number of hosts.
# With one host that wait was the whole session, which then expired (CI, 2026-12-05); zk_layout.connect now lists
# a lone server three times, so a hung handshake is given up after 20 s and the next one still finds the session.
RESTART_SESSION_S = 60.0

# A coordinator instance process (argv: url, instance id, session timeout): join the election and print
# "<instance id> <epoch>" on every promotion until killed, in one write (a kill between the pieces of a print would
# leave half a line).
INSTANCE = r"""
import sys, threading
from fabric.coordinator import zk_layout as layout
from fabric.coordinator.election import ControllerElection
url, instance_id, session_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
client = layout.connect(url, session_timeout=session_s)
ControllerElection(client, instance_id, f"127.0.0.1:{9000 + int(instance_id[-1])}",
                   on_promote=lambda token: print(f"{token.instance_id} {token.epoch}\n", end="", flush=True)).start()
threading.Event().wait()  # serve forever: the test ends this process with SIGKILL
"""


def _report_promotions(proc: subprocess.Popen, promotions: queue.Queue) -> None:
    """Put the (instance id, epoch) of every promotion `proc` prints into `promotions`."""
    for line in proc.stdout:
        instance_id, epoch = line.split()
        promotions.put((instance_id, int(epoch)))


@pytest.fixture
def observer(zk_url):
    client = layout.connect(zk_url)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def elections(zk_url):
    """Start in-process instances on their own sessions: start(id, **callbacks) -> ControllerElection."""
    started: list[ControllerElection] = []

    def start(instance_id: str, **callbacks) -> ControllerElection:
        election = ControllerElection(layout.connect(zk_url, session_timeout=SESSION_S), instance_id,
                                      f"{instance_id}.example:9093", **callbacks)
        started.append(election.start())
        return election
    yield start
    for election in started:
        election.stop()
        election.client.stop()
        election.client.close()


def test_three_processes_elect_exactly_one_and_fail_over_on_sigkill(zk_url, observer):
    promotions: queue.Queue = queue.Queue()
    procs = {f"i{n}": subprocess.Popen([sys.executable, "-c", INSTANCE, zk_url, f"i{n}", str(SESSION_S)],
                                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
             for n in range(3)}
    for proc in procs.values():
        threading.Thread(target=_report_promotions, args=(proc, promotions), daemon=True).start()
    try:
        wait_for(lambda: len(observer.get_children(layout.BROKER_IDS)) == 3, 60, "3 registered instances")
        first = wait_for(lambda: read_controller(observer), 30, "a controller")
        # every instance has registered and raced; epoch 1 means exactly one election was ever won
        assert first.epoch == 1 and int(observer.get(layout.CONTROLLER_EPOCH)[0]) == 1
        assert promotions.get(timeout=30) == (first.instance_id, 1)
        assert first.address == f"127.0.0.1:{9000 + int(first.instance_id[-1])}"

        procs[first.instance_id].kill()  # SIGKILL: no resignation, only the session timeout frees /controller
        second = wait_for(lambda: (c := read_controller(observer)) and c.instance_id != first.instance_id and c,
                          SESSION_S + 20, "a new controller after SIGKILL")
        assert second.epoch == 2 > first.epoch
        assert promotions.get(timeout=30) == (second.instance_id, 2)
        assert first.instance_id not in observer.get_children(layout.BROKER_IDS)
        with pytest.raises(queue.Empty):
            promotions.get_nowait()  # the third instance stayed a follower
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait(timeout=30)


def _expire_session(client: KazooClient, hosts: str) -> None:
    """Expire `client`'s session for real: attach a second client to it and close that one, again until `client`
    hears that its session expired (it reconnects at once when the second one takes the session, and may take it
    back before the close, or before the second one's handshake is answered)."""
    session, expired = client.client_id, threading.Event()

    def lost(state: KazooState) -> bool:
        if state == KazooState.LOST:
            expired.set()
        return expired.is_set()  # (True removes the listener)

    client.add_listener(lost)

    def closed_by_a_ghost() -> bool:
        ghost = KazooClient(hosts=hosts, client_id=session)
        try:
            ghost.start(timeout=5)
            ghost.stop()
        except KazooTimeoutError:
            pass  # (the session went back and forth meanwhile: try again)
        finally:
            ghost.close()
        return expired.wait(1.0)

    wait_for(closed_by_a_ghost, 60, "the session to expire")


def test_session_expiry_demotes_and_the_old_epoch_is_fenced(zk_url, elections, observer):
    demoted: list[EpochToken] = []
    a = elections("a", on_demote=demoted.append)
    assert a.wait_active(15) and a.state is ElectionState.ACTIVE
    old = a.token()
    b = elections("b")
    wait_for(lambda: b.state is ElectionState.FOLLOWER, 15, "b to follow")
    with pytest.raises(NotControllerError, match="'b' is not the active controller"):
        ZkCoordinator(b.client, fence=b).create_topic("from-b", 1, {}, None)
    as_a = ZkCoordinator(a.client, fence=a)
    as_a.create_topic("t", 1, {}, None)
    assert as_a.leader_state("t", 0) == layout.LeaderState("a", 0, ("a",), old.epoch)

    _expire_session(a.client, layout.parse_url(zk_url).hosts)
    wait_for(lambda: demoted == [old], 20, "a to be demoted after its session expired")
    new = wait_for(lambda: (c := read_controller(observer)) and c.epoch > old.epoch and c, 20, "a new election")
    # a write pinned to the old epoch is rejected by ZooKeeper itself, whoever holds the new one
    with pytest.raises(FencedError, match=f"epoch {old.epoch} of instance 'a'"):
        ZkCoordinator(observer, fence=old).create_topic("late-write", 1, {}, None)
    assert "late-write" not in as_a.list_topics()

    winner = {"a": a, "b": b}[new.instance_id]
    assert winner.wait_active(15) and winner.epoch == new.epoch
    as_winner = ZkCoordinator(winner.client, fence=winner)
    assert as_winner.take_leadership() == 1
    assert as_winner.leader_state("t", 0) == layout.LeaderState(new.instance_id, 1, (new.instance_id,), new.epoch)


def test_operator_deleting_controller_forces_reelection(elections, observer):
    events: list[tuple[str, int]] = []
    a = elections("solo", on_promote=lambda t: events.append(("promote", t.epoch)),
                  on_demote=lambda t: events.append(("demote", t.epoch)))
    assert a.wait_active(15)
    first = a.epoch
    observer.delete(layout.CONTROLLER)  # like Kafka's "delete /controller" to move the controller
    wait_for(lambda: len(events) == 3, 20, "demotion and re-election")
    assert events == [("promote", first), ("demote", first), ("promote", first + 1)]
    assert a.is_active and a.epoch == first + 1
    assert read_controller(observer).instance_id == "solo"
    a.stop()
    assert read_controller(observer) is None and events[-1] == ("demote", a.epoch)  # resigned on stop


def test_unreachable_server_suspends_writes_until_reconnected(own_zookeeper):
    client = layout.connect(own_zookeeper.url("/suspend"), session_timeout=RESTART_SESSION_S)
    election = ControllerElection(client, "x").start()
    try:
        assert client._session_timeout == RESTART_SESSION_S * 1000, "the server negotiated a shorter session"
        assert election.wait_active(15)
        epoch = election.epoch
        own_zookeeper.stop()
        wait_for(lambda: election.state is ElectionState.SUSPENDED, 15, "suspension")
        with pytest.raises(NotControllerError, match="state Suspended"):
            ZkCoordinator(client, fence=election).create_topic("t", 1, {}, None)
        own_zookeeper.start()  # same port and data: the session is still valid, so the instance stays controller
        assert election.wait_active(RESTART_SESSION_S) and election.epoch == epoch
        ZkCoordinator(client, fence=election).create_topic("t", 1, {}, None)
    finally:
        election.stop()
        client.stop()
        client.close()


def test_a_deposed_controller_cannot_change_a_partition_state(elections, observer):
    """Replicated partition states carry the controller epoch: a deposed controller's write fails in ZooKeeper
    (FencedError, a StaleControllerEpochError), and a new controller's take_leadership leaves them to the
    controller's elections (it only leads the topics created without replication)."""
    a = elections("a")
    assert a.wait_active(15)
    old = a.token()
    as_a = ZkCoordinator(a.client, fence=a)
    for node_id in (1, 2):
        as_a.register_node(node_id, f"h{node_id}:9092", directory_id=f"d{node_id}")
    state = LeaderAndIsr(1, 0, (1, 2), 0, old.epoch)
    as_a.create_replicated_topic("r", {}, None, {0: PartitionRegistration(PartitionAssignment((1, 2)), state)})
    as_a.create_topic("plain", 1, {}, None)
    assert as_a.take_leadership() == 0 and as_a.partition_registrations()[("r", 0)].state == state

    a.stop()
    b = elections("b")
    assert b.wait_active(15) and b.epoch > old.epoch
    shrunk = LeaderAndIsr(1, 0, (1,), 1, old.epoch)
    with pytest.raises(FencedError) as refused:
        ZkCoordinator(observer, fence=old).update_partition_states({("r", 0): (0, shrunk)})
    assert isinstance(refused.value, StaleControllerEpochError)
    as_b = ZkCoordinator(b.client, fence=b)
    with pytest.raises(StaleControllerEpochError):  # decided under the old epoch, written by the new controller
        as_b.update_partition_states({("r", 0): (0, shrunk)})
    assert as_b.partition_registrations()[("r", 0)].state == state
    assert as_b.take_leadership() == 1  # only "plain"
    assert as_b.leader_state("plain", 0) == layout.LeaderState("b", 1, ("b",), b.epoch)
    elected = LeaderAndIsr(2, 1, (2,), 1, b.epoch)
    assert as_b.update_partition_states({("r", 0): (0, elected)})
    assert as_b.partition_registrations()[("r", 0)].state == elected
