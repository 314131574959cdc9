"""Run the notebooks in notebooks/ top to bottom with a real IPython kernel (this venv's python); the quickstart
runs real Spark, explore_topics needs none.

The `notebooks` fixture (tests/integration/conftest.py) runs them; nothing is registered globally, so a clean clone
works as soon as `make test` has installed the project. Each notebook gets its own empty FABRIC_URL: an
embedded fabric in its tmp_path, or (explore_topics once more) the fabric:// URL of a coordinator with 3 data nodes.
(The notebooks' session helper alone: tests/unit/test_spark_session.py.)
"""
from __future__ import annotations

import re

import nbformat
import pytest


def cell(nb: nbformat.NotebookNode, cell_id: str) -> nbformat.NotebookNode:
    """The cell with this id (ids are set in the notebooks so tests can name the cells they check)."""
    found = [c for c in nb.cells if c.get("id") == cell_id]
    assert found, f"no cell with id {cell_id!r}; ids: {[c.get('id') for c in nb.cells]}"
    return found[0]


def text(cell_node: nbformat.NotebookNode) -> str:
    """Everything a code cell printed or displayed as text."""
    parts = []
    for output in cell_node.outputs:
        parts.append(output.get("text", ""))
        parts.append(output.get("data", {}).get("text/plain", ""))
    return "".join(parts)


def has_image(cell_node: nbformat.NotebookNode) -> bool:
    return any("image/png" in output.get("data", {}) for output in cell_node.outputs)


def check_explore_topics(nb: nbformat.NotebookNode) -> None:
    """What explore_topics shows on any fabric, with no Spark: the sample data, its first records of each
    partition, the lag, the plots, and throughput and lag over time."""
    assert "600 records in clicks" in text(cell(nb, "count"))
    assert "'clicks'" in text(cell(nb, "list"))
    sample = text(cell(nb, "sample"))
    rows = [line.split() for line in sample.splitlines() if line.strip().startswith("user-")]
    found = [(int(row[1]), int(row[2])) for row in rows]
    assert len(found) == 9 and all(sorted(o for q, o in found if q == p) == list(range(sum(q == p for q, _ in found)))
                                   for p in range(3)), sample  # each partition's first records, nothing else
    assert "clicks" in text(cell(nb, "parse"))  # the busiest users' table
    consumed = int(re.search(r"group dashboard consumed and committed (\d+) records", text(cell(nb, "seed")))[1])
    lag = int(re.search(r"group dashboard lags (\d+) records behind clicks", text(cell(nb, "lag-table")))[1])
    assert consumed >= 250 and consumed + lag == 600
    assert has_image(cell(nb, "offsets")) and has_image(cell(nb, "lag-plot"))
    assert has_image(cell(nb, "replication-plot"))
    table = text(cell(nb, "replication-table"))
    rows = re.findall(r"^([0-2]) .* (\d+)$", table, re.MULTILINE)  # partition ... lag, the table's last column
    assert [p for p, _ in rows] == ["0", "1", "2"] and sum(int(lag) for _, lag in rows) == lag, table
    found = re.search(r"caught up on (\d+): records \[600, 900, 900\], lag \[(\d+), (\d+), (\d+)\]",
                      text(cell(nb, "monitor")))
    assert found, text(cell(nb, "monitor"))
    caught_up, lags = int(found[1]), [int(x) for x in found.groups()[1:]]
    assert lags == [lag, lag + 300, lag + 300 - caught_up] and has_image(cell(nb, "monitor"))


@pytest.mark.slow
def test_explore_topics(notebooks, tmp_path):
    nb = notebooks.run("explore_topics.ipynb", tmp_path)
    check_explore_topics(nb)
    assert "data nodes: none" in text(cell(nb, "connect"))
    assert "clicks is not replicated: no leader, replicas or ISR" in text(cell(nb, "replication-table"))


@pytest.mark.slow
def test_explore_topics_on_cluster(notebooks, tmp_path, shared_cluster):
    """The same notebook against a coordinator and data nodes 1..3: clicks is replicated on all three."""
    nb = notebooks.run("explore_topics.ipynb", tmp_path, url=shared_cluster.url)
    check_explore_topics(nb)
    assert "data nodes: [1, 2, 3]" in text(cell(nb, "connect"))
    table = text(cell(nb, "replication-table"))
    found = re.search(r"clicks: leaders \[([^\]]*)\], ISR sizes \[([^\]]*)\]", table)
    assert found, table
    leaders, isr_sizes = found[1].split(", "), found[2].split(", ")
    assert len(leaders) == 3 and set(leaders) <= {"1", "2", "3"}, table  # no <NA>: every partition has a leader
    assert isr_sizes == ["3", "3", "3"], table


def output_counts(cell_node: nbformat.NotebookNode) -> tuple[int, int]:
    """(records in slow-pages, records expected) as a quickstart cell printed them."""
    found = re.search(r"slow-pages holds (\d+) of (\d+) expected records", text(cell_node))
    assert found, text(cell_node)
    return int(found[1]), int(found[2])


@pytest.mark.spark
@pytest.mark.slow
def test_streaming_quickstart(notebooks, tmp_path):
    nb = notebooks.run("streaming_quickstart.ipynb", tmp_path)
    assert output_counts(cell(nb, "read-output")) == (150, 150)  # (i * 7) % 500 >= 350 for 150 of 500 views
    held, expected = output_counts(cell(nb, "more"))
    assert held == expected > 150
    stopped_lag = re.search(r"group slow-pages-job lags (\d+) records behind page-views", text(cell(nb, "lag-table")))
    assert int(stopped_lag[1]) >= 100  # at least the 100 page views sent while the query was stopped
    held, expected = output_counts(cell(nb, "restart"))  # exactly once across the stop and restart
    assert held == expected > output_counts(cell(nb, "more"))[1]
    assert has_image(cell(nb, "lag-plot"))
