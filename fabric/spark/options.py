"""Option lookup shared by the Spark source and sinks: case-insensitive options, and the fabric URL rule."""
from __future__ import annotations

import os
from typing import Any, Mapping
from urllib.parse import urlparse

from fabric.client.url import DEFAULT_URL, ENV_URL

URL_CONF = "spark.fabric.url"


def get_option(options: Mapping[str, Any], name: str) -> str | None:
    """An option's value, looked up case-insensitively (Spark's own option maps are case-insensitive)."""
    wanted = name.lower()
    for key, value in options.items():
        if key.lower() == wanted:
            return None if value is None else str(value)
    return None


def _session_conf(key: str) -> str | None:
    """A Spark conf of the active session, when this process has one (the driver); else None."""
    try:
        from pyspark.sql import SparkSession
        session = SparkSession.getActiveSession()
        return session.conf.get(key, None) if session is not None else None
    except Exception:  # noqa: BLE001 (no JVM in this process, a Python worker: fall through to the environment)
        return None


def resolve_url(options: Mapping[str, Any]) -> str:
    """The fabric URL: option `url`, else Spark conf spark.fabric.url, else $FABRIC_URL, else ./fabric-data.

    A plain path is made absolute here, on the driver, so executors with another cwd open the same fabric."""
    url = get_option(options, "url") or _session_conf(URL_CONF) or os.environ.get(ENV_URL) or DEFAULT_URL
    return f"file://{os.path.abspath(url)}" if urlparse(url).scheme == "" else url
