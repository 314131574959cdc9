"""How `fabric produce` reads a line into a record and `fabric consume` prints a record as a line: Kafka's
LineMessageReader (parse.key, parse.headers of KIP-798) and DefaultMessageFormatter (print.timestamp,
print.partition, ...), set with `--property k=v` as in Kafka's console tools, and the strict JSON of
`consume --format json`.
"""
from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import math
from dataclasses import dataclass
from typing import Mapping

from fabric.cli.common import CommandError
from fabric.common.records import CREATE_TIME, LOG_APPEND_TIME, Record

NON_FINITE = {math.inf: "Infinity", -math.inf: "-Infinity"}  # and "NaN": the strings Spark's to_json writes
TIMESTAMP_TYPES = {CREATE_TIME: "CreateTime", LOG_APPEND_TIME: "LogAppendTime"}

# Kafka's names and defaults (kafka-console-producer --property, kafka-console-consumer --property).
READER_DEFAULTS = {"parse.key": "false", "key.separator": "\t", "parse.headers": "false",
                   "headers.delimiter": "\t", "headers.separator": ",", "headers.key.separator": ":"}
FORMATTER_DEFAULTS = {"print.timestamp": "false", "print.partition": "false", "print.offset": "false",
                      "print.headers": "false", "print.key": "false", "print.value": "true", "key.separator": "\t",
                      "line.separator": "\n", "headers.separator": ",", "headers.key.separator": ":",
                      "null.literal": "null"}


def properties(given: Mapping[str, str], defaults: Mapping[str, str]) -> dict[str, str]:
    """`defaults` updated with `given`; an unknown name is an error listing the known ones, a boolean
    (print.*, parse.*) must be true or false, and a separator cannot be empty."""
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise CommandError(f"unknown --property {', '.join(unknown)}; known: {', '.join(defaults)}")
    out = {**defaults, **given}
    for name, value in out.items():
        if name.startswith(("print.", "parse.")) and value.lower() not in ("true", "false"):
            raise CommandError(f"--property {name} must be true or false, got {value!r}")
        if name.endswith((".separator", ".delimiter")) and not value:
            raise CommandError(f"--property {name} cannot be empty; give the text that separates the fields")
    return out


def _flag(props: Mapping[str, str], name: str) -> bool:
    return props[name].lower() == "true"


# -- produce: a line -> (headers, key, value) ----------------------------------------------------------------
@dataclass(frozen=True)
class LineReader:
    """Kafka's LineMessageReader: `[headers<headers.delimiter>][key<key.separator>]value`, headers as
    `k:v,k2:v2` (a pair without headers.key.separator is a header with a null value)."""

    key_separator: bytes | None  # None: the whole line (after any headers) is the value
    headers_delimiter: bytes | None  # None: no headers
    headers_separator: bytes
    headers_key_separator: bytes

    @classmethod
    def of(cls, props: Mapping[str, str]) -> LineReader:
        """The reader `properties(..., READER_DEFAULTS)` describe."""
        return cls(props["key.separator"].encode() if _flag(props, "parse.key") else None,
                   props["headers.delimiter"].encode() if _flag(props, "parse.headers") else None,
                   props["headers.separator"].encode(), props["headers.key.separator"].encode())

    def read(self, line: bytes) -> tuple[list[tuple[str, bytes | None]], bytes | None, bytes]:
        """(headers, key, value) of one line."""
        headers: list[tuple[str, bytes | None]] = []
        if self.headers_delimiter is not None:
            text, found, line = line.partition(self.headers_delimiter)
            if not found:
                raise CommandError(f"no headers delimiter {self.headers_delimiter.decode()!r} found; write "
                                   f"k:v,k2:v2{self.headers_delimiter.decode()}value or drop parse.headers=true")
            headers = [self._header(pair) for pair in text.split(self.headers_separator)] if text else []
        if self.key_separator is None:
            return headers, None, line
        key, found, value = line.partition(self.key_separator)
        if not found:
            raise CommandError(f"no key separator {self.key_separator.decode()!r} found; write "
                               f"key{self.key_separator.decode()}value or drop --key-separator / parse.key=true")
        return headers, key, value

    def _header(self, pair: bytes) -> tuple[str, bytes | None]:
        name, found, value = pair.partition(self.headers_key_separator)
        try:
            return name.decode(), value if found else None
        except UnicodeDecodeError:
            raise CommandError(f"header name {name!r} is not UTF-8 text") from None


# -- consume: a record -> a line -----------------------------------------------------------------------------
@dataclass(frozen=True)
class LineFormatter:
    """Kafka's DefaultMessageFormatter: `CreateTime:<ms>`, `Partition:<p>`, `Offset:<o>`, headers (`k:v,k2:v2`
    or `NO_HEADERS`), key, value, in that order, each printed when asked, joined by key.separator."""

    timestamp: bool
    partition: bool
    offset: bool
    headers: bool
    key: bool
    value: bool
    key_separator: bytes
    line_separator: bytes
    headers_separator: bytes
    headers_key_separator: bytes
    null_literal: bytes

    @classmethod
    def of(cls, props: Mapping[str, str]) -> LineFormatter:
        """The formatter `properties(..., FORMATTER_DEFAULTS)` describe."""
        return cls(timestamp=_flag(props, "print.timestamp"), partition=_flag(props, "print.partition"),
                   offset=_flag(props, "print.offset"), headers=_flag(props, "print.headers"),
                   key=_flag(props, "print.key"), value=_flag(props, "print.value"),
                   key_separator=props["key.separator"].encode(), line_separator=props["line.separator"].encode(),
                   headers_separator=props["headers.separator"].encode(),
                   headers_key_separator=props["headers.key.separator"].encode(),
                   null_literal=props["null.literal"].encode())

    def line(self, record: Record, typed: bool) -> bytes:
        """The record as one output line, with its line separator."""
        fields: list[bytes] = []
        if self.timestamp:
            kind = TIMESTAMP_TYPES.get(record.timestamp_type)
            fields.append(f"{kind}:{record.timestamp}".encode() if kind else b"NO_TIMESTAMP")
        if self.partition:
            fields.append(b"Partition:%d" % record.partition)
        if self.offset:
            fields.append(b"Offset:%d" % record.offset)
        if self.headers:
            fields.append(self.headers_separator.join(k.encode() + self.headers_key_separator + self._bytes(v)
                                                      for k, v in record.headers) or b"NO_HEADERS")
        if self.key:
            fields.append(self._bytes(record.key))
        if self.value:
            fields.append(dumps(record.value).encode() if typed else self._bytes(record.value))
        return self.key_separator.join(fields) + self.line_separator if fields else b""

    def _bytes(self, data: bytes | None) -> bytes:
        return self.null_literal if data is None else data


def json_line(record: Record, typed: bool) -> bytes:
    """The record as one strict JSON object (and newline): key, value and header values that are UTF-8 as
    `"key"` / `"value"`, others base64 as `"key_b64"` / `"value_b64"`, so base64 is never taken for text."""
    fields = {"topic": record.topic, "partition": record.partition, "offset": record.offset,
              "timestamp": record.timestamp, **_text_or_b64("key", record.key),
              **({"value": record.value} if typed else _text_or_b64("value", record.value)),
              "headers": [{"key": k, **_text_or_b64("value", v)} for k, v in record.headers]}
    return dumps(fields).encode() + b"\n"


def _text_or_b64(name: str, data: bytes | None) -> dict[str, str | None]:
    """{name: text} if `data` is UTF-8 (or None), else {name_b64: base64}."""
    if data is None:
        return {name: None}
    try:
        return {name: data.decode()}
    except UnicodeDecodeError:
        return {f"{name}_b64": base64.b64encode(data).decode()}


def _json_default(value: object) -> object:
    if isinstance(value, bytes):  # a binary field of a typed value: its schema says it is bytes
        return base64.b64encode(value).decode()
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, (decimal.Decimal, dt.timedelta)):
        return str(value)
    raise TypeError(f"cannot show {type(value).__name__} as JSON")


def _finite(value: object) -> object:
    """`value` with NaN and ±infinity (which JSON cannot hold) as the strings Spark's to_json writes."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else NON_FINITE[value]
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def dumps(value: object) -> str:
    """Strict JSON (every line parses with any JSON parser)."""
    return json.dumps(_finite(value), default=_json_default, ensure_ascii=False, allow_nan=False)
