"""The coordinator service's fabric protocol requests (docs/protocol.md): produce and fetch of the partitions it
stores, the hot coordinator calls (`commit_offsets`, `committed`, `topic`, `list_topics`), and the metadata a client
plans reads by (`describe_cluster`, `partition_state`, `offset_for_time`), each the ROUTES call of the same name,
checked and authorized exactly as its DoAction is (CoordinatorService.run_route), with plain JSON values.
Over a store of local files (Coordinator.serves_locally) a commit, a metadata read and a produce to a topic
that asks for no fsync wait on nothing but this process's CPU and files, so they are answered on the event loop,
without a worker thread; over ZooKeeper, so are a topic's metadata and a produce once the topic is kept in memory
(Coordinator.topic_on_loop), and a commit once its topics and its group's state are (Coordinator.commits_on_loop).
The commits the loop reads in one turn are appended together, one append per offsets partition (LoopCommits,
coordinator.commit_batch), and answered once it is written. A cluster's coordinator (over SQLite; over ZooKeeper
once the commit's topics are kept) checks a commit on the loop too and sends its append to the offsets partition's
leader from there (fabric.server.offsets_on_loop), answering once the leader acknowledged it.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from typing import TYPE_CHECKING, Any, Callable

from fabric.common import checks
from fabric.common.errors import FabricError, InvalidRequestError
from fabric.common.protocol.cluster import cluster_json
from fabric.common.redaction import clip
from fabric.common.types import CommittedOffset
from fabric.coordinator.commit_batch import CommitBatch
from fabric.coordinator.interface import Coordinator
from fabric.server import loop_handoff, partition_ops, protocol_handlers
from fabric.server.cluster_broker import ClusterBroker
from fabric.server.producer_owners import ProducerOwners
from fabric.server.protocol_server import Handler, Payload
from fabric.storage.lock import without_waiting

if TYPE_CHECKING:
    from fabric.server.service import CoordinatorService


def offsets_of(value: Any) -> dict[tuple[str, int], int]:
    """A commit's offsets from their JSON form, [[topic, partition, offset], ...]; InvalidRequestError otherwise."""
    if isinstance(value, list) and all(isinstance(item, list) and len(item) == 3 and isinstance(item[0], str)
                                       and checks.is_integer(item[1]) and checks.is_integer(item[2])
                                       for item in value):
        return {(topic, partition): offset for topic, partition, offset in value}
    raise InvalidRequestError(f"request 'commit_offsets': argument 'offsets' must be a list of [topic, partition, "
                              f"offset] arrays, got {clip(value)}")


def committed_rows(committed: dict[tuple[str, int], CommittedOffset]) -> list[dict[str, Any]]:
    """`committed`'s answer as JSON objects, one per partition."""
    return [{"topic": topic, "partition": partition, "offset": c.offset, "metadata": c.metadata,
             "commit_ms": c.commit_ms} for (topic, partition), c in committed.items()]


def produce_waits(coordinator: Coordinator, owners: ProducerOwners | None, args: dict[str, Any]) -> bool:
    """Whether a produce to the service may wait, and so runs on a worker thread: unless it is no transaction's,
    to a topic whose checks read only this machine's files and memory (Coordinator.topic_on_loop: over SQLite, or
    over ZooKeeper once the topic is kept) that fsyncs on no count or time (no flush.messages or flush.ms override:
    its append writes this machine's page cache and waits on nothing), under no producer id whose owner `owners`
    would have to ask the store. A produce whose topic cannot be read waits, and is refused on the worker as
    always."""
    topic = args.get("topic")
    if not isinstance(topic, str) or args.get("transactional") or not coordinator.topic_on_loop(topic):
        return True
    if owners is not None and not owners.known(args.get("producer_id", -1)):
        return True
    try:
        return partition_ops.fsyncs(coordinator.topic(topic))
    except FabricError:
        return True


class LoopCommits:
    """The commits the event loop answers, gathered per turn of the loop and appended together
    (coordinator.commit_batch): the first commit of a turn schedules the batch's write after every request the
    loop has read."""

    def __init__(self) -> None:
        self._batch: CommitBatch | None = None

    def run(self, commit: Callable[[], None]) -> tuple[Any, Payload] | concurrent.futures.Future:
        """commit() (on the loop's thread), its rows queued in this turn's batch: a future of the answer, settled
        once they are written; the answer at once if it queued nothing."""
        if self._batch is None:
            self._batch = CommitBatch()
            asyncio.get_running_loop().call_soon(self._write)
        with self._batch.collecting() as queued:
            commit()
        if not queued:
            return None, b""
        answer: concurrent.futures.Future = concurrent.futures.Future()
        loop = asyncio.get_running_loop()

        def answered(done: concurrent.futures.Future) -> None:
            error = done.exception()
            if error is not None:
                answer.set_exception(error)
            else:
                answer.set_result((None, b""))

        def settled(done: concurrent.futures.Future) -> None:  # on the loop, or on a worker that wrote it
            loop_handoff.run_on(loop, answered, done)
        queued[0].done.add_done_callback(settled)  # one commit is one append of one offsets partition
        return answer

    def _write(self) -> None:
        batch, self._batch = self._batch, None
        if batch is not None:
            with without_waiting():  # (a partition whose lock is held is appended by a thread that waits for it)
                batch.write()


def handlers(service: CoordinatorService) -> dict[str, Handler]:
    """The coordinator's request types (besides echo)."""
    broker = service.broker

    loop_commits = LoopCommits()

    def commit_offsets(principal: str, args: dict[str, Any], payload: Payload
                       ) -> tuple[Any, Payload] | concurrent.futures.Future:
        if "offsets" in args:
            args["offsets"] = offsets_of(args["offsets"])
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # on a worker thread: commit_waits said it may wait
            service.run_route(principal, "commit_offsets", args)
            return None, b""
        return loop_commits.run(lambda: service.run_route(principal, "commit_offsets", args))

    def routed(name: str, answer: Callable[[Any], Any] = lambda result: result) -> Callable[..., tuple[Any, Payload]]:
        """A request served by the ROUTES call `name`, its result answered as `answer` makes it JSON."""
        def serve(principal: str, args: dict[str, Any], payload: Payload) -> tuple[Any, Payload]:
            return answer(service.run_route(principal, name, args)), b""
        return serve

    store = broker.coordinator

    def store_waits(args: dict[str, Any]) -> bool:
        """Whether a metadata read may wait: not over a store of local files (answered on the loop). A read of
        committed offsets always may: it waits for a producer transaction committing the group's."""
        return not store.serves_locally()

    def topic_waits(args: dict[str, Any], key: str = "name") -> bool:
        """Whether a request about the topic named by `key` may wait: not where the store has its metadata in memory
        or local files (a topic read; a fetch, key "topic", served on the loop is held there if it waits for
        records)."""
        name = args.get(key)
        return not isinstance(name, str) or not store.topic_on_loop(name)

    def commit_waits(args: dict[str, Any]) -> bool:
        """Whether a commit may wait: not where the store checks it locally and its offsets log takes it without
        blocking (answered from the loop once written, a cluster's once its leader acknowledged it). A commit
        whose group is not a string or whose offsets are not [[topic, partition, offset], ...] waits, to be refused
        on a worker."""
        group, offsets = args.get("group"), args.get("offsets")
        if not isinstance(group, str) or not isinstance(offsets, list) or not all(
                isinstance(item, list) and item and isinstance(item[0], str) for item in offsets):
            return True
        return not store.commits_on_loop(group, sorted({item[0] for item in offsets}))

    return {"produce": protocol_handlers.produce(service, ClusterBroker.append, broker.append, store.topic,
                                                 lambda args: produce_waits(store, service.producer_owners,
                                                                            args)),
            "fetch": protocol_handlers.fetch(service, ClusterBroker.fetch, broker.fetch, service.topic_schema,
                                             broker.log, functools.partial(topic_waits, key="topic")),
            "commit_offsets": Handler(commit_offsets, commit_waits, order=lambda args: ("commit", args.get("group")),
                                      moves=True),
            "committed": Handler(routed("committed", committed_rows)), "topic": Handler(routed("topic"), topic_waits),
            "describe_cluster": Handler(routed("describe_cluster", cluster_json)),
            "partition_state": Handler(routed("partition_state"), store_waits),
            "list_topics": Handler(routed("list_topics"), store_waits),
            "offset_for_time": Handler(routed("offset_for_time"))}
