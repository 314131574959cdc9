"""Windowed aggregation with a watermark: counts (and sums) per key and time window, from a topic into a typed
topic, emitting each window once it is final (append mode).

    spark-submit jobs/windowed_counts.py --url file:///data/fabric --checkpoint /ckpt/w \\
        --input clicks --output page-counts --group-by page --window "1 minute" --watermark "30 seconds"
"""
from __future__ import annotations

import pyarrow as pa
from pyspark.sql import functions as F

import fabric
from fabric.spark.job import parser, read_topic, run, session, trigger

OUTPUT_SCHEMA = pa.schema([("window_start", pa.timestamp("us", tz="UTC")),
                           ("window_end", pa.timestamp("us", tz="UTC")),
                           ("group", pa.string()), ("events", pa.int64())])


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--input", required=True, help="topic to read")
    p.add_argument("--output", required=True, help="typed topic to write (created if missing)")
    p.add_argument("--group-by", default="key", help="column to group by (e.g. a typed topic's field)")
    p.add_argument("--window", default="1 minute", help="tumbling window length")
    p.add_argument("--watermark", default="30 seconds", help="how late events may arrive")
    args = p.parse_args(argv)
    with fabric.connect(args.url) as fab:
        if args.output not in fab.list_topics():
            fab.create_topic(args.output, schema=OUTPUT_SCHEMA)
    spark = session("fabric-windowed-counts")
    events = read_topic(spark, args, args.input)
    counts = (events.withWatermark("timestamp", args.watermark)
              .groupBy(F.window("timestamp", args.window), F.col(args.group_by).cast("string").alias("group"))
              .agg(F.count(F.lit(1)).alias("events"))
              .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                      "group", "events", F.col("group").cast("binary").alias("key")))
    query = (counts.writeStream.format("fabric").outputMode("append").option("url", args.url)
             .option("topic", args.output).option("checkpointLocation", args.checkpoint)
             .queryName("windowed-counts").trigger(**trigger(args)).start())
    run(query, args)


if __name__ == "__main__":
    main()
