"""The hardening issue's storage repros, as a user runs them: the `fabric` CLI on a file:// fabric whose files
were damaged between commands. (Every variant, in-process: tests/unit/test_storage_*.py.)"""
from __future__ import annotations

import json
import os
import subprocess
import sys

FABRIC = os.path.join(os.path.dirname(sys.executable), "fabric")


def _fabric(root: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([FABRIC, "--url", f"file://{root}", *args], input=stdin, capture_output=True, text=True,
                          timeout=120)


def _consume(root: str, *extra: str) -> subprocess.CompletedProcess:
    return _fabric(root, "consume", "t", "--from-beginning", "--timeout-ms", "1500", "--format", "json", *extra)


def _offsets(out: str) -> list[tuple[int, str]]:
    return [(r["offset"], r["value"]) for r in map(json.loads, out.splitlines())]


def test_losing_the_high_watermark_keeps_the_partition(tmp_path):
    """Defect 1: after `rm high-watermark` the next produce wrote at offset 0 and only it remained."""
    root = str(tmp_path)
    assert _fabric(root, "topics", "create", "t").returncode == 0
    assert _fabric(root, "produce", "t", stdin="a\nb\nc\nd\ne\n").returncode == 0
    os.unlink(os.path.join(root, "t", "0", "high-watermark"))
    produced = _fabric(root, "produce", "t", stdin="f\n")
    assert produced.returncode == 0, produced.stderr
    assert "t-0" in produced.stderr and "recovered from the frames, which end at offset 5" in produced.stderr
    consumed = _consume(root)
    assert _offsets(consumed.stdout) == list(enumerate("abcdef")), consumed.stderr


def test_a_damaged_header_is_reported_and_later_batches_survive(tmp_path):
    """Defect 2: overwriting the second frame's magic made `consume` print the first batch and exit 0, and the
    next produce cut the third (acknowledged) batch and reused its offsets."""
    root = str(tmp_path)
    assert _fabric(root, "topics", "create", "t").returncode == 0
    for batch in ("a\nb\n", "c\nd\n", "e\nf\n"):
        assert _fabric(root, "produce", "t", stdin=batch).returncode == 0
    segment = os.path.join(root, "t", "0", f"{0:020d}.arrows")
    with open(segment, "rb") as f:
        data = f.read()
    first_data = int.from_bytes(data[4:8], "little") + 64  # past the schema frame
    second = first_data + int.from_bytes(data[first_data + 4:first_data + 8], "little") + 64
    base = int.from_bytes(data[second + 8:second + 16], "little")  # (a loaded producer may split a batch)
    end = base + int.from_bytes(data[second + 28:second + 32], "little")
    with open(segment, "r+b") as f:
        f.seek(second)
        f.write(b"XXXX")

    consumed = _consume(root)
    assert consumed.returncode == 1, consumed.stderr
    assert _offsets(consumed.stdout) == list(enumerate("abcdef"))[:base], consumed.stderr
    assert f"offsets {base}..{end - 1} at byte {second} of {segment}" in consumed.stderr
    assert f"seek to offset {end}" in consumed.stderr
    produced = _fabric(root, "produce", "t", stdin="g\n")
    assert produced.returncode == 0, produced.stderr
    described = _fabric(root, "topics", "describe", "t")
    assert described.stdout.splitlines()[2].split()[:3] == ["0", "0", "7"], described  # partition, start, end
    with open(segment, "rb") as f:
        assert f.read()[second + 4:len(data)] == data[second + 4:]  # nothing after the damage was cut
