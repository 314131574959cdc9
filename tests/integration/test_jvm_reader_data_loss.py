"""The JVM reader's data loss (`format("fabric-jvm")`, sources/jvm), as format("fabric") reports it: a topic deleted
while a stream reads it fails the query with failOnDataLoss, or is left behind; a batch replayed from the checkpoint
after its topic was re-created with fewer records is lost at once, and the new log is read once."""
from __future__ import annotations

import time

import pytest

import fabric
from fabric.common.waiting import wait_for
from fabric.spark import jar

pytestmark = [pytest.mark.spark,
              pytest.mark.skipif(jar.path() is None, reason="the JVM reader is not built (no javac): make install")]


@pytest.mark.parametrize("fail", [True, False])
def test_a_topic_deleted_while_a_stream_reads_it_is_data_loss_as_for_the_python_source(spark, shared_cluster,
                                                                                        tmp_path, fail) -> None:
    """With failOnDataLoss the stream fails naming the topic; without, it reads on the topics left."""
    for source in ("fabric-jvm", "fabric"):
        gone, kept = (f"jvm-deleted-{source}-{fail}-{which}".lower() for which in ("gone", "kept"))
        with fabric.connect(shared_cluster.url) as fab:
            for topic in (gone, kept):
                fab.create_topic(topic)
                with fab.producer() as producer:
                    for i in range(5):
                        producer.send(topic, b"%d" % i)
            name = f"deleted_{source.replace('-', '_')}_{fail}"
            query = (spark.readStream.format(source)
                     .options(url=shared_cluster.url, subscribe=f"{gone},{kept}", startingOffsets="earliest",
                              failOnDataLoss=str(fail).lower()).load()
                     .writeStream.format("memory").queryName(name)
                     .option("checkpointLocation", str(tmp_path / name)).start())
            try:
                query.processAllAvailable()
                assert spark.table(name).count() == 10
                fab.delete_topic(gone)
                if fail:
                    with pytest.raises(Exception, match=f"topic '{gone}' was deleted while the query was reading it"):
                        query.awaitTermination(120)
                    continue
                with fab.producer() as producer:
                    producer.send(kept, b"after")
                wait_for(lambda: spark.table(name).count() == 11, 120, f"{source} to read on")  # noqa: B023
                assert query.isActive
            finally:
                query.stop()


@pytest.mark.parametrize("fail", [True, False])
def test_a_batch_replayed_after_its_topic_was_re_created_shorter_is_data_loss_at_once_and_reads_the_new_log_once(
        spark, shared_cluster, tmp_path, fail) -> None:
    """A batch planned as [10, 20) of a topic the coordinator keeps fails in its sink; the topic is re-created with
    5 records, and the query restarted on its checkpoint: the replayed batch's offsets are lost at once (there is
    no leader to catch up: the task waited its whole retry time, 120 s), failing the query with failOnDataLoss, or
    skipped; the next batch reads the new log from its start, each record once (it was read twice)."""
    topic, seen = f"jvm-re-created-{fail}".lower(), []
    with fabric.connect(shared_cluster.url) as fab:
        fab.create_topic(topic)
        with fab.producer() as producer:
            for i in range(20):
                producer.send(topic, b"old-%d" % i)

    def run(until: int | None, fail_batch: int | None = None, fail_on_data_loss: bool = False):
        def sink(df, batch_id: int) -> None:
            seen.extend((batch_id, bytes(r.value)) for r in df.select("value").collect())
            if batch_id == fail_batch:
                raise RuntimeError("the sink fails this batch")
        options = {"url": shared_cluster.url, "subscribe": topic, "startingOffsets": "earliest",
                   "failOnDataLoss": str(fail_on_data_loss).lower()}
        if until is not None:
            options["maxOffsetsPerTrigger"] = str(until)
        return (spark.readStream.format("fabric-jvm").options(**options).load().writeStream.foreachBatch(sink)
                .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    query = run(10, fail_batch=1)  # batches [0, 10) and [10, 20), the second failing in the sink
    with pytest.raises(Exception, match="the sink fails this batch"):
        query.awaitTermination(120)
    with fabric.connect(shared_cluster.url) as fab:
        fab.delete_topic(topic)
        fab.create_topic(topic)
        with fab.producer() as producer:
            for i in range(5):
                producer.send(topic, b"new-%d" % i)
    seen.clear()
    started = time.monotonic()
    query = run(None, fail_on_data_loss=fail)
    if fail:
        with pytest.raises(Exception, match=f"offsets 10 to 19 of topic '{topic}' partition 0 are no longer in the "
                                            "log"):
            query.awaitTermination(120)
    else:
        query.awaitTermination(120)
        assert sorted(value for _, value in seen) == [b"new-%d" % i for i in range(5)]
    assert time.monotonic() - started < 60
