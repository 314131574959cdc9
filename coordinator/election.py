"""Election of the active coordinator instance over ZooKeeper, with epoch fencing (Kafka's controller).

Instances race to create the ephemeral /controller znode; the winner bumps /controller_epoch in the same
ZooKeeper transaction (compare-and-set on its version), so each election has its own epoch. Every write the
active instance makes carries a `check` of /controller_epoch's version (`EpochToken.guard`): once a newer
controller was elected, a deposed instance's write fails as a whole (FencedError), whatever it believes.

States: LOST (no session or not started) -> CANDIDATE (racing) -> ACTIVE | FOLLOWER (watching /controller).
ACTIVE -> SUSPENDED when the connection drops (no writes; back to ACTIVE if the session survives) and
ACTIVE/SUSPENDED -> LOST when the session expires; on the next session the instance races again.
"""
from __future__ import annotations

import enum
import logging
import threading
from dataclasses import dataclass
from typing import Callable

from kazoo.client import KazooClient, KazooState, TransactionRequest
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.watchers import DataWatch

from fabric.common.clock import SYSTEM_CLOCK
from fabric.common.errors import CoordinatorUnavailableError, StaleControllerEpochError
from fabric.coordinator import zk_layout as layout

log = logging.getLogger(__name__)
_POLL_S = 0.5  # the election thread re-checks at least this often, e.g. to retry a failed registration
_CALL_TIMEOUT_S = 5.0  # the most a cleanup call may wait for ZooKeeper (while disconnected it would wait forever)


class NotControllerError(CoordinatorUnavailableError):
    """This instance is not the active coordinator: send the request to the one /controller names."""


class FencedError(NotControllerError, StaleControllerEpochError):
    """A newer controller epoch exists: this instance was deposed and its write was rejected."""


class ElectionState(str, enum.Enum):
    LOST = "Lost"
    CANDIDATE = "Candidate"
    FOLLOWER = "Follower"
    ACTIVE = "Active"
    SUSPENDED = "Suspended"


S = ElectionState
_TRANSITIONS = {
    S.LOST: {S.CANDIDATE},
    S.CANDIDATE: {S.ACTIVE, S.FOLLOWER, S.LOST},
    S.FOLLOWER: {S.CANDIDATE, S.LOST},
    S.ACTIVE: {S.SUSPENDED, S.LOST},
    S.SUSPENDED: {S.ACTIVE, S.LOST},
}


@dataclass(frozen=True)
class EpochToken:
    """The right to write under controller epoch `epoch` (/controller_epoch at znode version `version`)."""

    instance_id: str
    epoch: int
    version: int

    def guard(self, txn: TransactionRequest) -> EpochToken:
        """Make `txn` fail unless this epoch is still the current one (must be the transaction's first op)."""
        txn.check(layout.CONTROLLER_EPOCH, self.version)
        return self

    def fenced(self, token: EpochToken) -> None:
        """A pinned token has no election to demote: the FencedError the writer raises is the whole answer."""


@dataclass(frozen=True)
class ControllerInfo:
    """What /controller says: the active instance, its address and epoch."""

    instance_id: str
    address: str
    epoch: int


def read_controller(client: KazooClient) -> ControllerInfo | None:
    """The active instance according to /controller, or None while there is none."""
    try:
        data, _ = client.retry(client.get, layout.CONTROLLER)
    except NoNodeError:
        return None
    doc = layout.loads(data)
    return ControllerInfo(doc["instance_id"], doc.get("address", ""), int(doc["epoch"]))


class ControllerElection:
    """One instance's part in the election; `guard` fences its writes. Call start(), and stop() at the end."""

    def __init__(self, client: KazooClient, instance_id: str, address: str = "",
                 on_promote: Callable[[EpochToken], None] | None = None,
                 on_demote: Callable[[EpochToken], None] | None = None) -> None:
        if not instance_id or layout.node(instance_id) != instance_id:
            raise ValueError(f"instance id {instance_id!r} must be non-empty letters, digits, '.', '_' or '-'")
        self.client, self.instance_id, self.address = client, instance_id, address
        self._on_promote, self._on_demote = on_promote, on_demote
        self._lock = threading.Condition()
        self._state = S.LOST
        self._token: EpochToken | None = None
        self._registered_session = 0
        self._wake = threading.Event()
        self._stopping = False
        self._announced: EpochToken | None = None  # the epoch on_promote was last called for
        self._thread = threading.Thread(target=self._run, name=f"election-{instance_id}", daemon=True)

    # -- public view ---------------------------------------------------------------------------------------
    @property
    def state(self) -> ElectionState:
        return self._state

    @property
    def is_active(self) -> bool:
        """True while this instance may write (ACTIVE, connected)."""
        return self._state is S.ACTIVE

    @property
    def epoch(self) -> int:
        """The epoch this instance won last (0 if it never won)."""
        return self._token.epoch if self._token else 0

    def wait_active(self, timeout: float) -> bool:
        """Block until this instance is active or `timeout` seconds pass; True if active."""
        with self._lock:
            return self._lock.wait_for(lambda: self._state is S.ACTIVE, timeout)

    def active_instance(self) -> ControllerInfo | None:
        """The instance /controller names (maybe another one), or None during an election."""
        return read_controller(self.client)

    def token(self) -> EpochToken:
        """The current epoch token; NotControllerError unless this instance is active."""
        with self._lock:
            if self._state is not S.ACTIVE or self._token is None:
                raise NotControllerError(
                    f"coordinator instance {self.instance_id!r} is not the active controller "
                    f"(state {self._state.value}); retry against the instance /controller names")
            return self._token

    def guard(self, txn: TransactionRequest) -> EpochToken:
        """Fence `txn` with the current epoch (see EpochToken.guard); NotControllerError if not active."""
        return self.token().guard(txn)

    def fenced(self, token: EpochToken) -> None:
        """A write under `token` was rejected: a newer epoch exists, so stop acting as the controller now."""
        with self._lock:
            if self._token == token and self._state in (S.ACTIVE, S.SUSPENDED):
                self._set(S.LOST)
        self._wake.set()

    # -- lifecycle -----------------------------------------------------------------------------------------
    def start(self) -> ControllerElection:
        """Register this instance and join the election (in a background thread)."""
        self.client.add_listener(self._on_connection)
        DataWatch(self.client, layout.CONTROLLER, self._on_controller_change)
        self._thread.start()
        self._wake.set()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Leave the election within about `timeout` seconds: resign if active (deleting /controller, so a
        standby takes over at once) and stop the background thread. Without a connection to ZooKeeper nothing
        is deleted: the znodes are ephemeral and go with the session."""
        with self._lock:
            self._stopping = True
            token, owned = self._token, self._state in (S.ACTIVE, S.SUSPENDED)
            if owned:
                self._set(S.LOST)
        self._wake.set()
        self._thread.join(timeout=timeout)
        self.client.remove_listener(self._on_connection)
        call_timeout = min(_CALL_TIMEOUT_S, max(timeout / 2, 0.1))
        if owned and token is not None:
            self._delete_if_mine(layout.CONTROLLER, call_timeout)
        self._delete_if_mine(layout.broker(self.instance_id), call_timeout)
        self._announce()

    # -- state machine -------------------------------------------------------------------------------------
    def _set(self, new: ElectionState) -> None:
        """Move to `new` (caller holds the lock); only the transitions in _TRANSITIONS are legal."""
        if new is self._state:
            return
        if new not in _TRANSITIONS[self._state]:
            raise AssertionError(f"illegal election transition {self._state.value} -> {new.value}")
        log.info("instance %s: %s -> %s", self.instance_id, self._state.value, new.value)
        self._state = new
        self._lock.notify_all()

    def _on_connection(self, zk_state: str) -> None:
        """kazoo's connection listener (its event thread: no ZooKeeper calls here)."""
        with self._lock:
            if zk_state == KazooState.LOST and self._state is not S.LOST:
                self._set(S.LOST)  # the session and its ephemerals are gone: stop writing at once
            elif zk_state == KazooState.SUSPENDED and self._state is S.ACTIVE:
                self._set(S.SUSPENDED)
        self._wake.set()

    def _on_controller_change(self, data: bytes | None, stat: object) -> bool:
        self._wake.set()
        return not self._stopping  # False ends the DataWatch

    def _run(self) -> None:
        while True:
            self._wake.wait(_POLL_S)
            self._wake.clear()
            if self._stopping:
                return
            try:
                self._step()
            except KazooException as exc:  # connection trouble: the listener will wake us again
                log.info("instance %s: election step failed (%r); retrying", self.instance_id, exc)
            try:
                self._announce()
            except Exception:  # a failing callback must not end the election thread
                log.exception("instance %s: promote/demote callback failed", self.instance_id)

    def _step(self) -> None:
        """Do what the current state needs; every step is idempotent and re-reads ZooKeeper."""
        if not self.client.connected:
            return
        session = self.client.client_id[0]
        with self._lock:
            if self._state is S.LOST:
                self._set(S.CANDIDATE)
            state = self._state
        if session != self._registered_session:
            self._register(session)
        controller = self._controller_owner()
        if state is S.FOLLOWER and controller is None:
            with self._lock:
                if self._state is S.FOLLOWER:
                    self._set(S.CANDIDATE)
                state = self._state
        if state is S.CANDIDATE:
            self._race(session)
        elif state in (S.ACTIVE, S.SUSPENDED):
            with self._lock:
                # else the connection changed during the read: the listener wakes the next step to decide
                settled = self._state is state and self.client.connected
                if settled:
                    self._set(S.ACTIVE if controller == session else S.LOST)
            if not settled or controller != session:
                self._wake.set()  # deposed (e.g. /controller deleted by an operator): race again

    def _controller_owner(self) -> int | None:
        """The session owning /controller, or None."""
        stat = self.client.exists(layout.CONTROLLER)
        return stat.ephemeralOwner if stat else None

    def _register(self, session: int) -> None:
        """Create this instance's ephemeral /brokers/ids/<id> for the current session."""
        path = layout.broker(self.instance_id)
        data = layout.dumps({"version": layout.FORMAT_VERSION, "instance_id": self.instance_id,
                             "address": self.address, "timestamp": SYSTEM_CLOCK.now_ms()})
        try:
            self.client.create(path, data, ephemeral=True)
        except NodeExistsError:
            stat = self.client.exists(path)
            if stat is not None and stat.ephemeralOwner != session:
                log.warning("instance id %r is registered by another live session; waiting for it to end",
                            self.instance_id)
                return
        self._registered_session = session

    def _race(self, session: int) -> None:
        """Try to become the controller: create /controller and bump /controller_epoch atomically."""
        try:
            self.client.create(layout.CONTROLLER_EPOCH, b"0")
        except NodeExistsError:
            pass
        data, stat = self.client.get(layout.CONTROLLER_EPOCH)
        token = EpochToken(self.instance_id, int(data) + 1, stat.version + 1)
        txn = self.client.transaction()
        txn.create(layout.CONTROLLER, layout.dumps({
            "version": layout.FORMAT_VERSION, "instance_id": self.instance_id, "address": self.address,
            "epoch": token.epoch, "timestamp": SYSTEM_CLOCK.now_ms()}), ephemeral=True)
        txn.set_data(layout.CONTROLLER_EPOCH, str(token.epoch).encode(), version=stat.version)
        created = txn.commit()[0]
        with self._lock:
            if self._state is not S.CANDIDATE:
                return  # the session was lost meanwhile: the ephemeral died with it
            if not isinstance(created, Exception):
                self._token = token
                self._set(S.ACTIVE)
                return
        if isinstance(created, NodeExistsError) and self._controller_owner() == session:
            self._delete_if_mine(layout.CONTROLLER)  # a leftover of ours we no longer trust: race again
            self._wake.set()
        elif isinstance(created, NodeExistsError):
            with self._lock:
                if self._state is S.CANDIDATE:
                    self._set(S.FOLLOWER)
        else:
            self._wake.set()  # the epoch moved under us (a concurrent election): race again

    def _delete_if_mine(self, path: str, timeout: float = _CALL_TIMEOUT_S) -> None:
        """Delete an ephemeral znode if this session owns it, waiting at most `timeout` seconds per call;
        nothing without a connection (the znode goes with the session)."""
        if not self.client.connected:
            log.info("instance %s: not connected to ZooKeeper; %s goes when the session expires", self.instance_id,
                     path)
            return
        try:
            stat = self.client.exists_async(path).get(timeout=timeout)
            if stat is not None and self.client.connected and stat.ephemeralOwner == self.client.client_id[0]:
                self.client.delete_async(path, version=stat.version).get(timeout=timeout)
        except (NoNodeError, KazooException, KazooTimeoutError) as exc:
            log.info("instance %s: could not delete %s (%r)", self.instance_id, path, exc)

    def _announce(self) -> None:
        """Call on_demote / on_promote for every change of the active epoch since the last call."""
        with self._lock:
            current = self._token if self._state in (S.ACTIVE, S.SUSPENDED) else None
            previous, self._announced = self._announced, current
        if previous is not None and previous != current and self._on_demote:
            self._on_demote(previous)
        if current is not None and current != previous and self._on_promote:
            self._on_promote(current)
