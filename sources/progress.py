"""Spark Kafka's source metrics (min/max/avgOffsetsBehindLatest), computed from a query's progress.

Spark's Kafka source puts them in each progress's `sources[i]["metrics"]` through ReportsSourceMetrics, a JVM
interface. A Python data source cannot (pyspark 4.3): DataSourceStreamReader has no metrics method, the planner
worker's protocol has no call for one, and the JVM class that runs a Python stream (PythonMicroBatchStream)
implements MicroBatchStream and SupportsAdmissionControl only, so the fabric source's `metrics` map stays empty.
Every progress still carries what the metrics are made of, the source's `endOffset` (where the batch read up to)
and `latestOffset` (the partitions' ends, from reportLatestOffset): this module computes them from those, as
Kafka's source does.
"""
from __future__ import annotations

import json
from typing import Any, Mapping

from fabric.sources.offsets import from_json


def offsets_behind_latest(source: Mapping[str, Any]) -> dict[str, str]:
    """Kafka's metrics for one entry of a progress's `sources` (e.g. `query.lastProgress["sources"][0]`): per
    partition, its latest offset minus the offset the batch read up to; their minimum, maximum and average, as
    strings like Kafka's. Empty when the progress has no offsets yet. The offsets may be JSON text (pyspark's
    progress objects) or already parsed (a progress's `json`, as a listener or a log holds it)."""
    if not source.get("endOffset") or not source.get("latestOffset"):
        return {}
    consumed, latest = (from_json((json.loads(value) if isinstance(value, str) else value) or {})
                        for value in (source["endOffset"], source["latestOffset"]))
    behind = [offset - consumed.get(tp, 0) for tp, offset in latest.items()]
    if not behind:
        return {}
    return {"minOffsetsBehindLatest": str(min(behind)), "maxOffsetsBehindLatest": str(max(behind)),
            "avgOffsetsBehindLatest": str(sum(behind) / len(behind))}
