"""Which of a data node's produces and fetches wait on a worker thread: an append that may wait on more than this
process's CPU and page cache, a request that first refreshes the node's assignment from the controller. The others
are served on the fabric protocol's event loop, as the coordinator service appends to its own partitions, without
the two thread switches a worker costs (docs/performance.md); a consumer's fetch that waits for records is held
there (consumer_fetches)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fabric.server import partition_ops

if TYPE_CHECKING:
    from fabric.server.node.replica_manager import ReplicaManager


def append_waits(replicas: ReplicaManager, args: dict[str, Any]) -> bool:
    """Whether an append with these (not yet checked) arguments may wait: a transactional one (verified with the
    coordinator), one to a topic that fsyncs, one that first refreshes the node's assignment from the controller
    (a partition it hosts no replica of, a newer leader epoch, another topic id), and an idempotent one to a
    partition whose producer state is not loaded yet (read from its segments first: producer_state_loader).
    Arguments of the wrong shape wait too: the append refuses them, as always."""
    if args.get("transactional") or refreshes(replicas, args):
        return True
    if args.get("producer_id", -1) != -1 and not replicas.producer_state_loaded((args["topic"], args["partition"])):
        return True
    info = replicas.hosted_topic(args["topic"])
    return info is None or partition_ops.fsyncs(info)


def refreshes(replicas: ReplicaManager, args: dict[str, Any]) -> bool:
    """Whether a request for a partition with these (not yet checked) arguments first refreshes the node's
    assignment from the controller (a partition it hosts no replica of, a newer leader epoch, another topic id): a
    fetch that does runs on a worker thread. Arguments of the wrong shape count too: the request refuses them, as
    always."""
    topic, partition, epoch = args.get("topic"), args.get("partition"), args.get("leader_epoch")
    topic_id = args.get("topic_id", "")
    if (not isinstance(topic, str) or not isinstance(partition, int) or not isinstance(epoch, (int, type(None)))
            or not isinstance(topic_id, str)):
        return True
    return replicas.hosted_topic(topic) is None or replicas.behind((topic, partition), epoch, topic_id)
