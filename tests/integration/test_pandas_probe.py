"""pyarrow's pandas probe settled without pandas (fabric/common/pandas_probe.py), in a fresh interpreter: conversions
then import no pandas, and pandas output still works, importing it then, with pandas' own semantics from there on;
a coordinator service never loads pandas."""
from __future__ import annotations

import subprocess
import sys

import fabric

SCRIPT = """
import sys
import pyarrow as pa
from fabric.common.pandas_probe import settle_without_pandas
settle_without_pandas()
pa.array([1, 2]); pa.array([b"x"], pa.binary()); pa.RecordBatch.from_pylist([{"a": 1}])
print("converted", "pandas" in sys.modules)
frame = pa.table({"a": [1, None]}).to_pandas()
print("to_pandas", "pandas" in sys.modules, frame["a"].isna().tolist())
import pandas as pd
print("from_pandas", pa.array(pd.Series([1.0, float("nan")]), from_pandas=True).null_count)
import importlib; importlib.import_module("pandas.api.types")
"""


def test_conversions_import_no_pandas_and_pandas_output_still_works() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[:3] == ["converted False", "to_pandas True [False, True]", "from_pandas 1"]


def test_a_process_that_imported_pandas_keeps_it() -> None:
    script = "import pandas, sys, pyarrow as pa\nfrom fabric.common.pandas_probe import settle_without_pandas\n" \
             "settle_without_pandas()\nimport pandas as pd\nprint(pa.array(pd.Series([1.0, float('nan')])).null_count)"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "1"  # a Series is still seen as one (NaN is null with pandas' semantics)


def test_a_coordinator_serving_writes_and_commits_imports_no_pandas(coordinators) -> None:
    service = coordinators()
    with fabric.connect(service.url()) as fab:
        fab.create_topic("t", partitions=1)
        with fab.producer() as producer:
            producer.send("t", b"v", key=b"k", headers=[("h", b"1")]).get()
        fab.cluster.coordinator.commit_offsets("g", {("t", 0): 1})
        assert fab.cluster.coordinator.committed("g")[("t", 0)].offset == 1
    assert service.process is not None
    with open(f"/proc/{service.process.pid}/maps") as maps:
        mapped = maps.read()
    assert "pyarrow" in mapped and "pandas/_libs" not in mapped
