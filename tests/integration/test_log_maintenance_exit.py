"""A process that exits while its background log maintenance is mid-partition (fabric.storage.log_maintenance):
the exit waits for that partition, so no daemon thread is inside Arrow's C++ while the interpreter finalizes,
which can abort the process (SIGABRT, "terminate called without an active exception")."""
from __future__ import annotations

import subprocess
import sys


def test_a_process_that_exits_without_stopping_it_waits_for_the_partition_in_progress(tmp_path):
    """At exit the maintenance stops first, after the partition in progress, and the process exits cleanly."""
    started, finished = tmp_path / "started", tmp_path / "finished"
    script = f"""
import os, time
from fabric.common.waiting import wait_for
from fabric.storage.log_maintenance import LogMaintenance

def slow_open():
    open({str(started)!r}, "w").close()
    time.sleep(1.0)  # the partition in progress when the process exits
    open({str(finished)!r}, "w").close()
    raise OSError("no log here")

LogMaintenance(lambda: [("t-0", slow_open)], 10).start()
wait_for(lambda: os.path.exists({str(started)!r}), 30, "the pass to start")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert finished.exists()  # the exit waited for the partition in progress
