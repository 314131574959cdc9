"""Group coordination shared out among the coordinator instances of a ZooKeeper store: each partition of the
replicated offsets topic is served by the instance /offsets_owners names (coordinator.offsets_owners), so commits
and group calls spread over the instances instead of all passing through the controller, and keep going while it
is paused.

`OwnersBalancer` runs on the controller: when it starts, when coordinator instances come or go, and every
REBALANCE_S, it gives the partitions of instances that left (or restarted) to live ones and evens the load, by
compare-and-set under its election's fence. Until the topic was migrated into once (the earlier stores' offsets
and groups, offsets_topic and topic_group_store) it keeps every partition itself, since the migration appends to
all of them; its loader's first load of the whole topic does it, and the balancer records that in /offsets_owners.

`OwnershipWatcher` runs on every instance: it reads the owners whenever one changes (and every REBALANCE_S), and
gives this instance's loader (fabric.server.replicated_offsets.OffsetsLoader) the partitions it owns in its current
ZooKeeper session, each under its epoch; a lost session gives up all of them. It also names the owner of any
partition (`owner_of`: where a client is sent) and fences this instance's writes of a transactional id's record
with its ownership of the group's partition (`fence`): a producer transaction's offsets are committed by the
group's owner.
"""
from __future__ import annotations

import functools
import logging
import threading
from typing import Any, Callable

from kazoo.client import KazooClient, KazooState, TransactionRequest
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from fabric.common.errors import CoordinatorUnavailableError
from fabric.coordinator import zk_layout as layout
from fabric.coordinator.election import NotControllerError
from fabric.coordinator.offsets_owners import (
    OWNERS,
    Owner,
    assign,
    live_instances,
    owner_path,
    read_owners,
    write_owners,
)
from fabric.coordinator.offsets_records import OFFSETS_TOPIC
from fabric.coordinator.zk_store import ZkCoordinator, ZkWriter
from fabric.server.controller_driver import ControllerDriver
from fabric.server.replicated_offsets import OffsetsLoader, ReplicatedOffsetsLog

log = logging.getLogger(__name__)
REBALANCE_S = 2.0  # the balancer and the watchers look again at least this often (a missed watch event)


class ServedElsewhereError(NotControllerError):
    """A call about a group whose offsets partition another instance serves: the client is sent to `owner`."""

    def __init__(self, message: str, owner: str) -> None:
        super().__init__(message)
        self.owner = owner


class _Follower:
    """A daemon thread named `name` that runs `look()` when poked and at least every REBALANCE_S; a look that
    fails (ZooKeeper away, a node not answering) is logged, once per distinct error, and made again later."""

    def __init__(self, name: str) -> None:
        self._dirty = True
        self._changed = threading.Condition()
        threading.Thread(target=self._run, name=name, daemon=True).start()

    def poke(self) -> None:
        """Look again soon."""
        with self._changed:
            self._dirty = True
            self._changed.notify_all()

    def look(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        failure = ""
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._dirty, REBALANCE_S)
                self._dirty = False
            try:
                self.look()
            except Exception as exc:  # noqa: BLE001 (the thread must survive: it looks again)
                if str(exc) != failure:
                    log.warning("%s: %s; retrying", threading.current_thread().name, exc)
                failure = str(exc)
                with self._changed:
                    self._dirty = True
                    self._changed.wait(REBALANCE_S)
                continue
            failure = ""


class OwnersBalancer(_Follower):
    """The controller's side: keeps /offsets_owners given to live instances, evenly (see the module doc), while
    `started` (this instance runs the controller under that epoch) and until `stopped`; `migrated()` says whether
    this instance's load of the whole topic found it migrated into."""

    def __init__(self, client: KazooClient, writer: ZkWriter, partitions: int, migrated: Callable[[], bool]) -> None:
        self.client, self.writer, self.partitions, self.migrated = client, writer, partitions, migrated
        self._epoch: int | None = None
        super().__init__("sharing the offsets partitions out")
        ChildrenWatch(client, layout.BROKER_IDS, lambda children: self.poke())

    def started(self, epoch: int) -> None:
        self._epoch = epoch
        self.poke()

    def stopped(self) -> None:
        self._epoch = None

    def look(self) -> None:
        epoch = self._epoch
        if epoch is None:
            return
        changes = self.writer.write(functools.partial(self._balance, epoch))
        for p, owner in sorted(changes.items()):
                log.info("%s-%d: served by coordinator instance %s from now on (epoch %d)", OFFSETS_TOPIC, p,
                         owner.instance_id, owner.epoch)

    def _balance(self, epoch: int, txn: TransactionRequest, token: object) -> dict[int, Owner]:
        """Add to `txn` the owner changes the instances registered now call for, and return them (fresh reads:
        the writer runs this again on a conflict)."""
        live, owners = live_instances(self.client), read_owners(self.client, self.partitions)
        me = self.client.client_id[0] if self.client.client_id else None
        self.client.ensure_path(OWNERS)
        data, _ = self.client.get(OWNERS)
        done = bool(data) and bool(layout.loads(data).get("migrated"))
        if not done and self.migrated():
            txn.set_data(OWNERS, layout.dumps({"version": layout.FORMAT_VERSION, "migrated": True}))
            done = True
        if not done:  # the migration appends to every partition: the controller keeps them all until it ran
            live = {i: instance for i, instance in live.items() if instance.session == me}
        changes = assign({p: owner for p, (owner, _) in owners.items()}, live, self.partitions, epoch)
        write_owners(txn, changes, {p: version for p, (_, version) in owners.items()})
        return changes


class OwnershipWatcher(_Follower):
    """Every instance's side: gives `loader` the partitions /offsets_owners gives instance `instance_id` in its
    current session (see the module doc), and forgets the offsets of deleted topics in them."""

    def __init__(self, client: KazooClient, instance_id: str, loader: OffsetsLoader, partitions: int) -> None:
        self.client, self.instance_id, self.loader, self.partitions = client, instance_id, loader, partitions
        self._owners: dict[int, tuple[Owner, int]] = {}  # each partition's owner, and its znode's version
        self._topics: set[str] | None = None  # the topics that exist, as last seen
        self._deleted: list[str] = []  # topics deleted since, whose offsets are still to be forgotten
        super().__init__("following the owners of the offsets partitions")
        client.add_listener(self._on_state)
        for p in range(partitions):
            DataWatch(client, owner_path(p), lambda data, stat: self.poke())
        ChildrenWatch(client, layout.TOPICS, self._topics_seen)

    def owner_of(self, partition: int) -> str:
        """The address of the instance serving `partition`, as last read ("" if none was given)."""
        found = self._owners.get(partition)
        return found[0].address if found else ""

    def given(self) -> list[int]:
        """The partitions this instance was given in its current session (as last read)."""
        return sorted(p for p, (owner, _) in self._owners.items() if self._mine(owner))

    def require(self, partition: int) -> None:
        """Return if this instance was given `partition` in its current session (as last read); else
        ServedElsewhereError naming the instance that was, or CoordinatorUnavailableError while none was."""
        found = self._owners.get(partition)
        if found is not None and self._mine(found[0]):
            return
        if found is None:
            raise CoordinatorUnavailableError(f"{OFFSETS_TOPIC}-{partition} has no coordinator instance yet (the "
                                              "active instance gives it one once the topic is loaded); retry shortly")
        raise ServedElsewhereError(f"{OFFSETS_TOPIC}-{partition} (the group's offsets and membership) is served by "
                                   f"coordinator instance {found[0].address}; retry there", found[0].address)

    def _mine(self, owner: Owner) -> bool:
        session = self.client.client_id[0] if self.client.client_id else None
        return bool(owner.instance_id == self.instance_id and owner.session == session)

    def fence(self, partition: int) -> PartitionFence:
        """The fence of this instance's ZooKeeper writes made as the owner of `partition`; NotControllerError if
        it does not own it."""
        found = self._owners.get(partition)
        if found is None or not self._mine(found[0]):
            raise NotControllerError(f"this coordinator instance does not serve {OFFSETS_TOPIC}-{partition}; retry "
                                     f"at {self.owner_of(partition) or 'its owner'}")
        return PartitionFence(partition, found[1])

    def _on_state(self, state: str) -> None:
        if state == KazooState.LOST:  # the controller gives its partitions to others: serve none of them
            self.loader.want({})
        self.poke()

    def _topics_seen(self, children: list[str]) -> None:
        """Each instance forgets the offsets of deleted topics in the partitions it serves (Kafka's group
        coordinators do so for theirs)."""
        names = {layout.name_of(c) for c in children}
        with self._changed:
            if self._topics is not None:
                self._deleted += sorted(self._topics - names)
            self._topics = names
        self.poke()

    def look(self) -> None:
        owners = read_owners(self.client, self.partitions)
        self._owners = owners
        self.loader.want({p: owner.epoch for p, (owner, _) in owners.items() if self._mine(owner)})
        while self._deleted:
            self.loader.topic.forget_topic(self._deleted[0])
            with self._changed:
                self._deleted.pop(0)


class PartitionFence:
    """A ZooKeeper write's fence: the writer still owns offsets partition `partition` as given at znode version
    `version` of its /offsets_owners znode (a check in the same transaction)."""

    def __init__(self, partition: int, version: int) -> None:
        self.partition, self.version = partition, version

    def guard(self, txn: TransactionRequest) -> None:
        txn.check(owner_path(self.partition), self.version)

    def fenced(self, token: Any) -> None:
        raise NotControllerError(f"this coordinator instance no longer serves {OFFSETS_TOPIC}-{self.partition} "
                                 "(it was given to another instance); nothing was written, retry at its owner")


def share_out(store: object, controller: ControllerDriver, loader: OffsetsLoader, instance: str
              ) -> OwnershipWatcher | None:
    """Make `loader` serve this instance's share of the offsets topic: with a ZooKeeper store, the partitions
    /offsets_owners gives it (its controller balancing them while it runs); otherwise (a single instance) every
    partition while its controller runs. The watcher of the owners, if any."""
    if not isinstance(store, ZkCoordinator) or not isinstance(loader.topic.log, ReplicatedOffsetsLog):
        controller.on_start, controller.on_stop = loader.started, loader.stopped
        return None
    partitions = loader.topic.partitions
    balancer = OwnersBalancer(store.client, store.writer, partitions, loader.topic.log.migrated)
    loader.on_loaded = balancer.poke
    controller.on_start, controller.on_stop = balancer.started, balancer.stopped
    watcher = OwnershipWatcher(store.client, instance.replace(":", "_"), loader, partitions)
    store.partition_fence = watcher.fence
    return watcher
