"""Shared fixtures: an embedded fabric in a temp dir, and one real local[2] SparkSession per test run."""
from __future__ import annotations

import os
import sys

import pytest

# Spark's Python workers fail to connect back in sandboxes unless these are set (see README).
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

import fabric  # noqa: E402

pytest_plugins = ["tests.zookeeper", "tests.service"]  # real ZooKeeper server and coordinator fixtures


@pytest.fixture
def fabric_dir(tmp_path) -> str:
    """A fresh directory for an embedded fabric."""
    path = tmp_path / "fabric"
    path.mkdir()
    return str(path)


@pytest.fixture
def fabric_url(fabric_dir: str) -> str:
    return f"file://{fabric_dir}"


@pytest.fixture
def fab(fabric_url: str):
    """A connected embedded fabric, closed after the test."""
    with fabric.connect(fabric_url) as handle:
        yield handle


@pytest.fixture(scope="session")
def spark():
    """One real local[2] SparkSession for the whole run (starting one costs seconds)."""
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("fabric-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.sql.streaming.stopTimeout", "30s")
               .config("spark.python.worker.reuse", "true")
               .getOrCreate())
    session.sparkContext.setLogLevel("WARN")
    yield session
    session.stop()
