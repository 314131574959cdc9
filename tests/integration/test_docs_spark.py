"""The Spark examples of README.md and docs/ run, against the run's shared SparkSession.

Without Spark, the docs' example tests (the root conftest.py) skip a Spark block, which a
`<!-- skip: next "... tests/integration/test_docs_spark.py ..." -->` comment precedes. Here every Python block of
each page that has one runs in order in one namespace, as a reader pasting the page into a pyspark shell would:
`spark` is the session, and $FABRIC_URL names a fresh embedded fabric, which the examples' `fabric.connect()`
opens and their queries name with the `url` option.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from sybil import Sybil
from sybil.parsers.markdown import PythonCodeBlockParser

from fabric.client.url import ENV_URL

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"<!--\s*skip:\s*next\b[^>]*tests/integration/test_docs_spark\.py")
PAGES = sorted(path.relative_to(REPO).as_posix() for path in [REPO / "README.md", *(REPO / "docs").rglob("*.md")]
               if MARKER.search(path.read_text()))
# No skip parser: the blocks the Spark-less run skips are the ones this test is for.
EXAMPLES = Sybil(parsers=[PythonCodeBlockParser()])


def test_the_pages_with_spark_examples_are_found():
    assert {"README.md", "docs/getting-started.md", "docs/spark/source.md", "docs/spark/sink.md"} <= set(PAGES)


@pytest.mark.parametrize("page", PAGES)
def test_every_example_of_the_page_runs_with_spark(page, spark, tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_URL, f"file://{tmp_path / 'fabric'}")
    monkeypatch.chdir(tmp_path)
    document = EXAMPLES.parse(REPO / page)
    document.namespace["spark"] = spark
    try:
        examples = list(document.examples())
        assert examples, f"{page} has no Python example"
        for example in examples:
            example.evaluate()  # an example that raises fails the test, naming its line
        assert not [query.name for query in spark.streams.active], f"{page} left a streaming query running"
    finally:
        for query in spark.streams.active:
            query.stop()
