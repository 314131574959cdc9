"""pyarrow's first conversion of Python values imports pandas, to ask whether they are pandas objects: 0.4 CPU s
and some 50 MB in a process that never sees one. A server or the CLI converts Python values (a commit's offsets,
a produced line) but is never handed a pandas object, so it settles that probe as "no pandas" before its first
conversion. pyarrow imports pandas after all the first time it is asked for pandas output (`to_pandas`)."""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from typing import Sequence

import pyarrow as pa


class _NoPandas(importlib.abc.MetaPathFinder):
    """Refuses to import pandas while it is installed (first in sys.meta_path)."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: object = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if fullname == "pandas" or fullname.startswith("pandas."):
            raise ModuleNotFoundError("pandas is not imported by this process (fabric.common.pandas_probe)",
                                      name=fullname)
        return None


def settle_without_pandas() -> None:
    """Have pyarrow's pandas probe find none, unless pandas is imported already (then pyarrow uses it) or the
    probe ran (then this changes nothing). Call it before the process starts other threads."""
    if "pandas" in sys.modules:
        return
    blocker = _NoPandas()
    sys.meta_path.insert(0, blocker)
    try:
        pa.array([0])  # the probe: it asks once per process
    finally:
        sys.meta_path.remove(blocker)
