"""Log engine benchmark: produce and consume N records of 100-byte values in one process, beside a pure
pyarrow IPC write/read of the same data (the physical ceiling on this machine)."""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile

import numpy as np
import pyarrow as pa

import fabric
from bench.report import bar_chart, progress, save, table, timed

VALUE_BYTES = 100
CHUNK = 16_384


def make_values(n: int) -> pa.Table:
    """n random 100-byte values (incompressible, as the seeds' benchmark), in 16K-row chunks."""
    rng = np.random.default_rng(7)
    data = rng.integers(0, 256, size=n * VALUE_BYTES, dtype=np.uint8)
    offsets = np.arange(0, (n + 1) * VALUE_BYTES, VALUE_BYTES, dtype=np.int32)
    values = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    return pa.table({"value": values}).combine_chunks()


def ipc_ceiling(tbl: pa.Table, directory: str) -> tuple[float, float]:
    """Seconds to write the table as an Arrow IPC stream file, then to read it back memory-mapped."""
    path = os.path.join(directory, "ceiling.arrows")
    with timed("pyarrow IPC write") as w:
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_stream(sink, tbl.schema) as writer:
            for batch in tbl.to_batches(max_chunksize=CHUNK * 4):
                writer.write_batch(batch)
    with timed("pyarrow IPC read (mmap)") as r:
        with pa.memory_map(path) as source:
            rows = sum(b.num_rows for b in pa.ipc.open_stream(source))
    assert rows == tbl.num_rows
    return w["seconds"], r["seconds"]


def run(records: int, send_records: int, directory: str) -> dict:
    """Run every measurement; returns records/s per path."""
    tbl = make_values(records)
    mb = records * VALUE_BYTES / 1e6
    write_s, read_s = ipc_ceiling(tbl, directory)
    fab = fabric.connect(os.path.join(directory, "fabric"))
    fab.create_topic("bench")
    with fab.producer() as producer:
        with timed(f"fabric send_batch of {records:,} records") as produce:
            producer.send_batch("bench", tbl)
    fab.create_topic("bench-send")
    values = tbl.column("value").slice(0, send_records).to_pylist()
    with fab.producer() as producer:
        with timed(f"fabric per-record send of {send_records:,} records") as send:
            for value in values:
                producer.send("bench-send", value)
            producer.flush()
    consumer = fab.consumer("bench", auto_offset_reset="earliest")
    with timed(f"fabric poll_batch of {records:,} records") as consume:
        got = 0
        while got < records:
            got += consumer.poll_batch(1.0).num_rows
    results = {
        "records": records, "value_bytes": VALUE_BYTES,
        "ipc_write_rps": records / write_s, "ipc_read_rps": records / read_s,
        "produce_batch_rps": records / produce["seconds"], "produce_batch_mbps": mb / produce["seconds"],
        "send_rps": send_records / send["seconds"],
        "consume_rps": records / consume["seconds"], "consume_mbps": mb / consume["seconds"],
    }
    results["produce_vs_ipc_write"] = results["produce_batch_rps"] / results["ipc_write_rps"]
    results["consume_vs_ipc_read"] = results["consume_rps"] / results["ipc_read_rps"]
    return results


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--send-records", type=int, default=2_000_000)
    parser.add_argument("--dir", default=None, help="scratch directory (default: a temp dir, removed after)")
    args = parser.parse_args(argv)
    directory = args.dir or tempfile.mkdtemp(prefix="fabric-bench-")
    os.makedirs(directory, exist_ok=True)
    try:
        results = run(args.records, args.send_records, directory)
    finally:
        if args.dir is None:
            shutil.rmtree(directory, ignore_errors=True)
    save("log", results)
    chart = bar_chart("log", f"Log engine, {args.records:,} x 100-byte records, one process", [
        ("pyarrow IPC write (ceiling)", results["ipc_write_rps"]),
        ("fabric send_batch", results["produce_batch_rps"]),
        ("fabric send() per record", results["send_rps"]),
        ("pyarrow IPC read (ceiling)", results["ipc_read_rps"]),
        ("fabric poll_batch", results["consume_rps"]),
    ], "records/s")
    print(table([
        ("batched produce (send_batch)", f"{results['produce_batch_rps']:,.0f}",
         f"{results['produce_batch_mbps']:,.0f}", f"{results['produce_vs_ipc_write']:.2f} of IPC write"),
        ("per-record send()", f"{results['send_rps']:,.0f}", "", ""),
        ("consume (poll_batch)", f"{results['consume_rps']:,.0f}", f"{results['consume_mbps']:,.0f}",
         f"{results['consume_vs_ipc_read']:.2f} of IPC read"),
    ], ("path", "records/s", "MB/s", "vs pyarrow IPC, same run")))
    progress(f"plot: {chart}")
    return results


if __name__ == "__main__":
    main()
