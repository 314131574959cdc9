"""Topic -> SQL transformation -> topic, exactly once.

The input topic is the temporary view `input` (Kafka's columns, or a typed topic's value columns); the SQL's
result must have the sink's columns: `value` (or the output topic's typed columns), optionally `key`,
`headers`, `partition`, `timestamp`.

    spark-submit jobs/transform.py --url file:///data/fabric --checkpoint /ckpt/t \\
        --input clicks --output big-clicks --sql "SELECT user AS key, page, amount FROM input WHERE amount > 10"
"""
from __future__ import annotations

from fabric.spark.job import parser, read_topic, run, session, trigger


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--input", required=True, help="topic to read")
    p.add_argument("--output", required=True, help="topic to write (must exist)")
    p.add_argument("--sql", default="SELECT key, value FROM input", help="query over the view `input`")
    p.add_argument("--group-id", default=None, help="consumer group that shows this query's lag")
    p.add_argument("--output-url", default=None,
                   help="fabric the sink writes to (default: --url): an embedded one (file:///dir), or a cluster "
                        "with data nodes (fabric://host:port) whose output topic is replicated")
    args = p.parse_args(argv)
    spark = session("fabric-transform")
    options = {"groupId": args.group_id} if args.group_id else {}
    read_topic(spark, args, args.input, **options).createOrReplaceTempView("input")
    query = (spark.sql(args.sql).writeStream.format("fabric").option("url", args.output_url or args.url)
             .option("topic", args.output).option("checkpointLocation", args.checkpoint)
             .queryName("transform").trigger(**trigger(args)).start())
    run(query, args)


if __name__ == "__main__":
    main()
