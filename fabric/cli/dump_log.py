"""`fabric dump-log`: kafka-dump-log, for an operator looking into a partition's files as they lie on disk (a
damaged disk, a recovery's report): a segment's frames one line each, every CRC checked, the damage between them
(scan.Walk, as readers find it), with --deep-iteration each record's metadata and with --print-data-log the
records; an offset or time index's entries, each checked (an offset index entry against the frame it names), or
with --verify-index-only / --index-sanity-check only the entries that fail. It reads the files only, so it works
on a copy, or on a stopped node's directory, with nothing running."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import pyarrow as pa

from fabric.cli.common import CommandError, add_command, utc_text
from fabric.cli.formats import json_line
from fabric.common.codecs import CODECS
from fabric.common.errors import CorruptRecordError
from fabric.common.records import CREATE_TIME, LOG_APPEND_TIME, Record, stored_records, value_schema_of
from fabric.storage import frame
from fabric.storage.frame import FrameError, FrameHeader
from fabric.storage.index import OffsetIndex, TimeIndex
from fabric.storage.scan import Damage, resync
from fabric.storage.segment import DATA_SUFFIX, INDEX_SUFFIX, TIME_SUFFIX, Segment

CODEC_OF = {c.attribute: c.name for c in CODECS.values()}


def dump_log(args: argparse.Namespace) -> None:
    """Dump each of --files, one after another."""
    for number, path in enumerate(args.files.split(",")):
        if number:
            print()
        kind = os.path.splitext(path)[1]
        base = _base_offset(path, kind)
        print(f"Dumping {path}")
        if kind == DATA_SUFFIX:
            _dump_segment(path, base, args.print_data_log, args.deep_iteration)
        else:
            _dump_index(path, base, kind, args.verify_index_only or args.index_sanity_check)


def _base_offset(path: str, kind: str) -> int:
    """The base offset a file's name carries (20 digits), checked to be one dump-log reads."""
    stem = os.path.basename(path)[:-len(kind)] if kind else ""
    if kind not in (DATA_SUFFIX, INDEX_SUFFIX, TIME_SUFFIX) or not (len(stem) == 20 and stem.isdigit()):
        raise CommandError(f"{path} is not a segment ({DATA_SUFFIX}) or index ({INDEX_SUFFIX}, {TIME_SUFFIX}) "
                           "file: dump-log reads files named by their base offset, e.g. "
                           f"00000000000000000000{DATA_SUFFIX}")
    if not os.path.isfile(path):
        raise CommandError(f"{path} does not exist (or is not a file)")
    return int(stem)


def _dump_segment(path: str, base: int, print_data: bool, deep: bool) -> None:
    """The schema, then one line per frame or damaged range, and the records of each: with `print_data` as JSON
    lines, with `deep` their metadata as kafka-dump-log --deep-iteration prints it."""
    seg = Segment(os.path.dirname(os.path.abspath(path)), base)
    schema: pa.Schema | None
    try:
        schema, start = seg.schema, seg.data_start
        print(f"Schema: {', '.join(f'{f.name}: {f.type}' for f in schema)}")
    except CorruptRecordError:
        found = resync(seg.view(), 0, base, None)
        schema, start = None, seg.view().size if found is None else found.position
        print(f"Damaged: no valid schema frame at byte 0; frames from byte {start} (records cannot be decoded)")
    topic, partition = _named(path)
    for item in seg.walk(start, base, verify_from=base):
        if isinstance(item, Damage):
            print(f"Damaged: {item.describe()}")
            continue
        print(_frame_line(item.header, item.position))
        if (print_data or deep) and schema is not None and item.header.delivered:
            payload = seg.view().slice(item.position + frame.HEADER_SIZE, item.header.length)
            batch = frame.decode_batch(payload, schema)
            stamp_type = LOG_APPEND_TIME if item.header.attributes & frame.ATTR_LOG_APPEND_TIME else CREATE_TIME
            typed = value_schema_of(schema) is not None
            for number, record in enumerate(stored_records(batch, topic, partition, item.header.base_offset,
                                                           stamp_type)):
                sys.stdout.write("| " + json_line(record, typed).decode() if print_data
                                 else _record_line(record, item.header, number) + "\n")


def _record_line(record: Record, h: FrameHeader, number: int) -> str:
    """One record's metadata as kafka-dump-log --deep-iteration prints it (a typed value's size is its columns')."""
    def size(data: Any) -> str:
        return "-1" if data is None else str(len(data)) if isinstance(data, bytes) else "typed"
    stamp = "LogAppendTime" if record.timestamp_type == LOG_APPEND_TIME else "CreateTime"
    sequence = -1 if h.base_sequence < 0 else h.base_sequence + number
    return (f"| offset: {record.offset} {stamp}: {record.timestamp} keySize: {size(record.key)} "
            f"valueSize: {size(record.value)} sequence: {sequence} "
            f"headerKeys: [{','.join(key for key, _ in record.headers)}]")


def _frame_line(h: FrameHeader, position: int) -> str:
    """One frame as kafka-dump-log prints a batch (its fields under Kafka's names where Kafka has them)."""
    last_sequence = -1 if h.base_sequence < 0 else h.base_sequence + h.record_count - 1
    stamp = "LogAppendTime" if h.attributes & frame.ATTR_LOG_APPEND_TIME else "CreateTime"
    return (f"baseOffset: {h.base_offset} lastOffset: {h.next_offset - 1} count: {h.record_count} "
            f"baseSequence: {h.base_sequence} lastSequence: {last_sequence} producerId: {h.producer_id} "
            f"producerEpoch: {h.producer_epoch} partitionLeaderEpoch: {h.leader_epoch} "
            f"isTransactional: {str(h.is_transactional).lower()} isControl: {str(h.is_control).lower()} "
            f"isGap: {str(h.is_gap).lower()} position: {position} {stamp}: {_when(h.max_timestamp)} size: {h.size} "
            f"codec: {CODEC_OF.get(h.attributes & frame.ATTR_CODEC, '?')} crc: {h.crc} isvalid: true")


def _when(micros: int) -> str:
    return utc_text(micros) or str(micros)


def _named(path: str) -> tuple[str, int]:
    """The topic and partition a segment's directory names (topic/partition/), or ("", -1)."""
    directory = os.path.dirname(os.path.abspath(path))
    name = os.path.basename(directory)
    return (os.path.basename(os.path.dirname(directory)), int(name)) if name.isdigit() else ("", -1)


def _dump_index(path: str, base: int, kind: str, failures_only: bool) -> None:
    """An index's entries (absolute offsets), each checked: an offset index entry must name a frame starting at
    its offset, a time index's timestamps and offsets must not fall. With `failures_only`, only the failing
    entries, then whether the index passed (kafka-dump-log --verify-index-only, --index-sanity-check)."""
    lines: list[tuple[str, str]] = []
    if kind == TIME_SUFFIX:
        previous = (-2**63, -1)
        for stamp, rel in TimeIndex(path).entries.tolist():
            fault = " MISMATCH: it falls below the entry before it" if (stamp, rel) < previous else ""
            previous = max(previous, (stamp, rel))
            lines.append((f"timestamp: {_when(stamp)} offset: {base + rel}", fault))
    else:
        data = path[:-len(kind)] + DATA_SUFFIX
        view = Segment(os.path.dirname(os.path.abspath(path)), base).view() if os.path.isfile(data) else None
        lines = [(f"offset: {base + rel} position: {position}", _index_check(view, base + rel, position))
                 for rel, position in OffsetIndex(path).entries.tolist()]
    failed = [line + fault for line, fault in lines if fault]
    for line in failed if failures_only else [line + fault for line, fault in lines]:
        print(line)
    if failures_only:
        print(f"{path} failed sanity check: {len(failed)} of {len(lines)} entries" if failed
              else f"{path} passed sanity check ({len(lines)} entries).")


def _index_check(view: pa.Buffer | None, offset: int, position: int) -> str:
    if view is None:
        return ""
    try:
        header = frame.unpack_header(view, position)
    except FrameError:
        return " MISMATCH: no frame header there"
    if header.is_schema or header.base_offset != offset:
        kind = "the segment's schema frame" if header.is_schema else f"a frame of offset {header.base_offset}"
        return f" MISMATCH: {kind} is there"
    return ""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `fabric dump-log`."""
    p = add_command(subparsers, "dump-log", dump_log, "print a partition's segment or index files as they lie on "
                    "disk (kafka-dump-log)",
                    description="Print segment files (.arrows) frame by frame, each CRC checked and any damage "
                                "between frames shown, as kafka-dump-log does, and with --print-data-log their "
                                "records as JSON lines; print index files (.index, .timeindex) entry by entry, "
                                "flagging offset index entries that name no frame. Reads the files only: nothing "
                                "needs to run, and a copy of the files will do.")
    p.add_argument("--files", required=True, metavar="FILE[,FILE]", help="the files to print, comma-separated")
    p.add_argument("--print-data-log", action="store_true", help="print each frame's records too, as JSON lines")
    p.add_argument("--deep-iteration", action="store_true", help="print each frame's records' offset, timestamp, "
                   "key and value sizes, sequence and header keys")
    p.add_argument("--verify-index-only", action="store_true", help="of an index, print only the entries that "
                   "fail their check, then whether it passed")
    p.add_argument("--index-sanity-check", action="store_true", help="the same as --verify-index-only")
