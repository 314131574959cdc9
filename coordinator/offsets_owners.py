"""Which coordinator instance serves each partition of the replicated offsets topic (the groups whose offsets it
holds): Kafka's group coordinator per `__consumer_offsets` partition, shared out among the coordinator instances of
a ZooKeeper store instead of the data nodes. The active instance (the controller) decides; each instance loads and
serves what is given to it (fabric.server.offsets_ownership).

In ZooKeeper, `/offsets_owners/<p>` holds {"instance_id", "address", "session", "epoch"}: the owner of partition p,
the ZooKeeper session its registration (/brokers/ids/<id>) was made in, and the epoch it serves p under. Only the
controller writes them, fenced by its election and by compare-and-set on each znode's version.

Invariants (`assign`):
- a partition is given only to a live instance (registered in that session);
- a partition keeps its owner while the owner lives, in the same session, and holds no more than its fair share
  (ceil(partitions / live instances)); the others go to the least loaded live instances, the lowest id first;
- a partition that changes owner (or session) gets an epoch above every epoch it had and at least the
  controller's: the owner stamps it on the partition (producer epoch of the offsets producer), so a deposed owner's
  late appends are refused by the data nodes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from kazoo.client import KazooClient, TransactionRequest

from fabric.coordinator import zk_layout as layout
from fabric.coordinator.zk_store import ZkWriter

OWNERS = "/offsets_owners"


@dataclass(frozen=True)
class Instance:
    """A live coordinator instance: its address and the ZooKeeper session of its registration."""

    address: str
    session: int


@dataclass(frozen=True)
class Owner:
    """The instance serving a partition of the offsets topic, and the epoch it serves it under."""

    instance_id: str
    address: str
    session: int
    epoch: int


def owner_path(partition: int) -> str:
    return f"{OWNERS}/{partition}"


def assign(current: Mapping[int, Owner], live: Mapping[str, Instance], partitions: int, floor: int
           ) -> dict[int, Owner]:
    """The partitions whose owner must change, with their new owners: live owners keep up to their fair share,
    the rest go to the least loaded live instances (see the module's invariants). {} without live instances."""
    if not live:
        return {}
    share = math.ceil(partitions / len(live))
    held: dict[str, list[int]] = {instance_id: [] for instance_id in live}
    moving = []
    for p in range(partitions):
        owner = current.get(p)
        if (owner is not None and live.get(owner.instance_id) == Instance(owner.address, owner.session)
                and len(held[owner.instance_id]) < share):
            held[owner.instance_id].append(p)
        else:
            moving.append(p)
    changes = {}
    for p in moving:
        instance_id = min(live, key=lambda i: (len(held[i]), i))
        held[instance_id].append(p)
        last = current.get(p)
        epoch = max(floor, last.epoch + 1 if last is not None else 0)
        changes[p] = Owner(instance_id, live[instance_id].address, live[instance_id].session, epoch)
    return changes


def live_instances(client: KazooClient) -> dict[str, Instance]:
    """The coordinator instances registered now (ephemeral /brokers/ids/<id> with a non-numeric id; data nodes'
    ids are numbers), by instance id."""
    names = [n for n in client.retry(client.get_children, layout.BROKER_IDS) if not n.isdigit()]
    found = ZkWriter(client).get_many([layout.broker(layout.name_of(n)) for n in names])
    return {layout.name_of(n): Instance(layout.loads(f[0])["address"], f[1].ephemeralOwner)
            for n, f in zip(names, found, strict=True) if f is not None and f[1].ephemeralOwner}


def read_owners(client: KazooClient, partitions: int) -> dict[int, tuple[Owner, int]]:
    """Each partition's owner and its znode's version (the compare-and-set token), where one was given."""
    found = ZkWriter(client).get_many([owner_path(p) for p in range(partitions)])
    return {p: (Owner(**{k: v for k, v in layout.loads(f[0]).items() if k != "version"}), f[1].version)
            for p, f in enumerate(found) if f is not None}


def write_owners(txn: TransactionRequest, changes: Mapping[int, Owner], versions: Mapping[int, int]) -> None:
    """Add the writes of `changes` to `txn`: each znode set by compare-and-set on the version it was read at
    (`versions`; created where it has none, under an OWNERS that exists)."""
    for p, owner in sorted(changes.items()):
        data = layout.dumps({"version": layout.FORMAT_VERSION, "instance_id": owner.instance_id,
                             "address": owner.address, "session": owner.session, "epoch": owner.epoch})
        if p in versions:
            txn.set_data(owner_path(p), data, version=versions[p])
        else:
            txn.create(owner_path(p), data)
