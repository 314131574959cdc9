"""Topic -> stateless SQL -> topic in Spark's real-time mode: long tasks that read each record as it comes.

The input topic (of a fabric:// cluster) is the temporary view `input`, read by the JVM reader; the SQL must be
stateless (projections, filters) and give the columns of the foreach sink, fabric.sinks.foreach_writer.TopicWriter:
`value`, optionally `key`, `headers`, `partition`. Real-time mode allows only a few sinks (foreach, Kafka,
console), so this job writes through foreach: at least once, where jobs/transform.py's micro-batches are exactly
once. Spark hands a Python foreach writer its rows in pickled batches that fill as rows come, and the last ones at
the end of the real-time batch, so records reach the output topic seconds after they came in, not milliseconds
(docs/performance.md). The JVM reader's jar must be on Spark's class path:

    spark-submit --jars "$(python -m fabric.spark.jar)" jobs/realtime.py --url fabric://host:9092 \\
        --checkpoint /ckpt/rt --input clicks --output alerts --sql "SELECT key, value FROM input WHERE key = 'x'"
"""
from __future__ import annotations

from fabric.sinks.foreach_writer import TopicWriter
from fabric.spark.job import parser, run, session


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__.split("\n\n")[0], micro_batches=False)
    p.add_argument("--input", required=True, help="topic to read")
    p.add_argument("--output", required=True, help="topic to write (must exist)")
    p.add_argument("--sql", default="SELECT key, value, partition FROM input",
                   help="a stateless query over the view `input`")
    p.add_argument("--batch-duration", default="10 seconds",
                   help="how long each real-time batch reads before its offsets are checkpointed")
    args = p.parse_args(argv)
    spark = session("fabric-realtime")
    (spark.readStream.format("fabric-jvm").option("url", args.url).option("subscribe", args.input)
     .option("startingOffsets", "earliest").load().createOrReplaceTempView("input"))
    query = (spark.sql(args.sql).writeStream.foreach(TopicWriter(args.url, args.output))
             .option("checkpointLocation", args.checkpoint).outputMode("update").queryName("realtime")
             .trigger(realTime=args.batch_duration)  # type: ignore[call-overload]  # pyspark 4.3's stubs omit it
             .start())
    run(query, args)


if __name__ == "__main__":
    main()
