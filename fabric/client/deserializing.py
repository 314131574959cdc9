"""kafka-python's key_deserializer / value_deserializer: functions of the stored bytes that the consumer passes
each non-null key and value of the records poll() returns through."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from fabric.common.errors import InvalidArgumentError, InvalidConfigError
from fabric.common.records import Record

Deserializer = Callable[[bytes], Any]


class Deserializers:
    """A consumer's key and value deserializers (either may be None: that part stays bytes)."""

    def __init__(self, key: Deserializer | None, value: Deserializer | None) -> None:
        for name, given in (("key_deserializer", key), ("value_deserializer", value)):
            if given is not None and not callable(given):
                raise InvalidConfigError(f"{name} must be a function of the stored bytes (e.g. json.loads), got "
                                         f"{type(given).__name__}")
        self.key, self.value = key, value

    def apply(self, records: list[Record]) -> list[Record]:
        """The records with their non-null keys and values passed through the deserializers; a failure names
        the record it failed on and how to skip it."""
        kd, vd = self.key, self.value
        if kd is None and vd is None:
            return records
        out = []
        for r in records:
            try:
                out.append(dataclasses.replace(r, key=kd(r.key) if kd and r.key is not None else r.key,
                                               value=vd(r.value) if vd and r.value is not None else r.value))
            except Exception as exc:  # noqa: BLE001 (user code: name the record it failed on)
                raise InvalidArgumentError(
                    f"a deserializer failed on {r.topic}-{r.partition} offset {r.offset} ({type(exc).__name__}: "
                    f"{exc}); seek past it with seek({r.topic!r}, {r.partition}, {r.offset + 1})") from exc
        return out
