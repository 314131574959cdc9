"""Topic -> Delta table archive, exactly once (Delta app transactions keyed by query and batch id).

Writes with delta-spark where the Delta jars are on the cluster, else with deltalake (delta-rs); the table is
a plain Delta table either way.

    spark-submit jobs/archive.py --url file:///data/fabric --checkpoint /ckpt/a --topic clicks --table /lake/clicks
"""
from __future__ import annotations

from fabric.sinks.delta_sink import DeltaArchiver
from fabric.spark.job import parser, read_topic, run, session, trigger


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--topic", required=True, help="topic to archive")
    p.add_argument("--table", required=True, help="Delta table directory")
    p.add_argument("--group-id", default=None, help="consumer group that shows this query's lag")
    args = p.parse_args(argv)
    spark = session("fabric-archive")
    options = {"groupId": args.group_id} if args.group_id else {}
    query = (read_topic(spark, args, args.topic, **options).writeStream
             .foreachBatch(DeltaArchiver(args.table)).option("checkpointLocation", args.checkpoint)
             .queryName("archive").trigger(**trigger(args)).start())
    run(query, args)


if __name__ == "__main__":
    main()
