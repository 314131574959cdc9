"""The JVM reader (`format("fabric-jvm")`, sources/jvm), built by `make install` with javac against pyspark's jars
and on the test session's class path: a batch read of a replicated topic and of a topic the coordinator keeps gives
the rows the Python source gives, in Arrow columns handed to Spark as they were fetched, planned and read over the
fabric protocol alone (the coordinator's protocol port found from its Flight port); bad options are named."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import fabric
from fabric.spark import jar

pytestmark = [pytest.mark.spark,
              pytest.mark.skipif(jar.path() is None, reason="the JVM reader is not built (no javac): make install")]


@pytest.fixture(scope="module")
def topics(shared_cluster) -> dict[str, int]:
    """A replicated topic (2 partitions, RF 3) and one the coordinator keeps, with keys, null keys and empty values;
    the records each holds."""
    counts = {"jvm-replicated": 500, "jvm-kept": 30}
    with fabric.connect(shared_cluster.url) as fab:
        fab.create_topic("jvm-replicated", partitions=2, replication_factor=3)
        fab.create_topic("jvm-kept", partitions=1)
        with fab.producer() as producer:
            for topic, count in counts.items():
                for i in range(count):
                    producer.send(topic, b"" if i % 11 == 0 else b"value-%d" % i,
                                  key=None if i % 7 == 0 else b"key-%d" % i, partition=i % (2 if "rep" in topic else 1))
    return counts


def rows(df) -> list[tuple]:
    return sorted((tuple(r) for r in df.collect()), key=lambda r: (r[3], r[4]))


@pytest.mark.parametrize("topic", ["jvm-replicated", "jvm-kept"])
def test_the_jvm_reader_reads_the_rows_the_python_source_reads(spark, shared_cluster, topics, topic) -> None:
    jvm = spark.read.format("fabric-jvm").option("url", shared_cluster.url).option("subscribe", topic).load()
    python = spark.read.format("fabric").option("url", shared_cluster.url).option("subscribe", topic).load()
    assert jvm.schema == python.schema
    got = rows(jvm)
    assert len(got) == topics[topic] and got == rows(python)
    assert [r[4] for r in got if r[3] == 0] == list(range(len([r for r in got if r[3] == 0])))
    plan = jvm._jdf.queryExecution().executedPlan().toString()
    assert "fabric JVM reader: topic " + topic in plan and "ColumnarToRow" in plan  # Arrow columns, not rows
    latest = spark.read.format("fabric-jvm").option("url", shared_cluster.url).option("subscribe", topic) \
        .option("startingOffsets", "latest").load()
    assert latest.count() == 0


@pytest.mark.parametrize("option, value, named", [
    ("subscribePattern", "jvm-.*", "unknown option subscribePattern"),
    ("startingOffsets", '{"jvm-kept": {"0": 3}}', "startingOffsets must be earliest or latest"),
    ("url", "file:///tmp/x", "must be a fabric:// URL"),
])
def test_bad_options_are_named_before_anything_is_read(spark, shared_cluster, topics, option, value, named) -> None:
    reader = spark.read.format("fabric-jvm").option("url", shared_cluster.url).option("subscribe", "jvm-kept")
    with pytest.raises(Exception, match=named):
        reader.option(option, value).load().collect()


def test_without_javac_the_jar_is_not_built_and_says_why(tmp_path) -> None:
    bare = {**os.environ, "PATH": str(tmp_path)}  # no javac (nor anything else) on PATH
    done = subprocess.run([sys.executable, "-c", "import sys; from fabric.spark import jar; "
                           "sys.exit(0 if jar.build() is None else 1)"], env=bare, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "javac (a JDK) is not on PATH" in done.stderr and 'format("fabric") reads with the Python source' in \
        done.stderr
