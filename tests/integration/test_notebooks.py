"""Run the notebooks in notebooks/ top to bottom with a real IPython kernel (this venv's python) and real Spark.

The kernel is described by a kernelspec written into a temp dir, so nothing is registered globally and a clean
clone works as soon as `make test` has installed the project. Each notebook gets its own empty FABRIC_URL: an
embedded fabric in its tmp_path, or (explore_topics once more) the fabric:// URL of a coordinator with 3 data nodes.
(The notebooks' session helper alone: tests/unit/test_spark_session.py.)
"""
from __future__ import annotations

import json
import os
import re
import sys
from datetime import datetime
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
KERNEL = "fabric-venv"
CELL_TIMEOUT_S = 180


@pytest.fixture(scope="module")
def kernel_dir(tmp_path_factory) -> str:
    """A kernelspec directory holding one kernel: ipykernel on the python running the tests."""
    root = tmp_path_factory.mktemp("kernels")
    spec = root / KERNEL
    spec.mkdir()
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Spark Fabric (venv)", "language": "python"}))
    return str(root)


def run_notebook(name: str, kernel_dir: str, tmp_path: Path, url: str | None = None) -> nbformat.NotebookNode:
    """Execute notebooks/<name> in tmp_path with FABRIC_URL=`url`, by default a fresh embedded fabric in tmp_path;
    any cell error fails the test."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), \
        f"{name} is committed with outputs; clear them (Kernel > Restart & Clear Output) before committing"
    if url is None:
        fabric_dir = tmp_path / "fabric-data"  # not "fabric": in the kernel's cwd it would shadow the package
        fabric_dir.mkdir()
        url = f"file://{fabric_dir}"
    # The notebooks' temp dirs, the IPython profile and the connection file all go to tmp_path, not $HOME or /tmp.
    env = {**os.environ, "FABRIC_URL": url, "IPYTHONDIR": str(tmp_path / "ipython"),
           "TMPDIR": str(tmp_path)}
    km = KernelManager(kernel_name=KERNEL, kernel_spec_manager=KernelSpecManager(kernel_dirs=[kernel_dir]),
                       connection_file=str(tmp_path / "kernel-connection.json"))
    client = NotebookClient(nb, km=km, timeout=CELL_TIMEOUT_S, resources={"metadata": {"path": str(tmp_path)}})
    try:
        client.execute(env=env)
    finally:
        print(timings(nb))  # shown by pytest when the test fails
    return nb


def timings(nb: nbformat.NotebookNode) -> str:
    """Seconds each executed code cell took, from the execution metadata nbclient records."""
    out = []
    for c in nb.cells:
        meta = c.metadata.get("execution", {})
        if "iopub.execute_input" in meta and "shell.execute_reply" in meta:
            took = (datetime.fromisoformat(meta["shell.execute_reply"].rstrip("Z"))
                    - datetime.fromisoformat(meta["iopub.execute_input"].rstrip("Z")))
            out.append(f"{c.id}={took.total_seconds():.1f}s")
    return "cell times: " + " ".join(out)


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
    """What explore_topics shows on any fabric: the sample data, a sample of it read with Spark, the lag, the plots."""
    assert "600 records in clicks" in text(cell(nb, "count"))
    assert "'clicks'" in text(cell(nb, "list"))
    sample = text(cell(nb, "sample"))
    rows = [line.split("|") for line in sample.splitlines() if line.startswith("|user-")]
    assert sorted(int(row[3]) for row in rows) == [0, 0, 0, 1, 1, 1, 2, 2, 2], sample  # 3 of each partition
    consumed = int(re.search(r"group dashboard consumed and committed (\d+) records", text(cell(nb, "seed")))[1])
    lag = int(re.search(r"group dashboard lags (\d+) records behind clicks", text(cell(nb, "lag-table")))[1])
    assert consumed >= 250 and consumed + lag == 600
    assert has_image(cell(nb, "offsets")) and has_image(cell(nb, "lag-plot"))
    assert has_image(cell(nb, "replication-plot"))
    table = text(cell(nb, "replication-table"))
    rows = re.findall(r"^([0-2]) .* (\d+)$", table, re.MULTILINE)  # partition ... lag, the table's last column
    assert [p for p, _ in rows] == ["0", "1", "2"] and sum(int(lag) for _, lag in rows) == lag, table


@pytest.mark.spark
@pytest.mark.slow
def test_explore_topics(kernel_dir, tmp_path):
    nb = run_notebook("explore_topics.ipynb", kernel_dir, tmp_path)
    check_explore_topics(nb)
    assert "data nodes: none" in text(cell(nb, "connect"))
    assert "clicks is not replicated: no leader, replicas or ISR" in text(cell(nb, "replication-table"))


@pytest.mark.spark
@pytest.mark.slow
def test_explore_topics_on_cluster(kernel_dir, tmp_path, shared_cluster):
    """The same notebook against a coordinator and data nodes 1..3: clicks is replicated on all three."""
    nb = run_notebook("explore_topics.ipynb", kernel_dir, tmp_path, url=shared_cluster.url)
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
def test_streaming_quickstart(kernel_dir, tmp_path):
    nb = run_notebook("streaming_quickstart.ipynb", kernel_dir, tmp_path)
    assert output_counts(cell(nb, "read-output")) == (150, 150)  # (i * 7) % 500 >= 350 for 150 of 500 views
    held, expected = output_counts(cell(nb, "more"))
    assert held == expected > 150
    stopped_lag = re.search(r"group slow-pages-job lags (\d+) records behind page-views", text(cell(nb, "lag-table")))
    assert int(stopped_lag[1]) >= 100  # at least the 100 page views sent while the query was stopped
    held, expected = output_counts(cell(nb, "restart"))  # exactly once across the stop and restart
    assert held == expected > output_counts(cell(nb, "more"))[1]
    assert has_image(cell(nb, "lag-plot"))
