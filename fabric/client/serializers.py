"""kafka-python's key_serializer / value_serializer and key_deserializer / value_deserializer: functions the
producer passes each non-null key and value of send() through, and the consumer each non-null key and value of
the records poll() returns. A failure refuses that record alone and names it."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from fabric.common.errors import InvalidArgumentError, InvalidConfigError, InvalidRecordError
from fabric.common.records import Record

Serializer = Callable[[Any], Any]
Deserializer = Callable[[bytes], Any]


def _checked(name: str, given: Callable[..., Any] | None, takes: str) -> Any:
    if given is not None and not callable(given):
        raise InvalidConfigError(f"{name} must be {takes}, got {type(given).__name__}")
    return given


class Serializers:
    """A producer's key and value serializers (either may be None: that part is sent as given)."""

    def __init__(self, key: Serializer | None, value: Serializer | None) -> None:
        takes = "a function of one value returning bytes or str (e.g. lambda v: json.dumps(v).encode())"
        self.key = _checked("key_serializer", key, takes)
        self.value = _checked("value_serializer", value, takes)

    def apply(self, key: Any, value: Any) -> tuple[Any, Any]:
        """The key and value as send() stores them: each non-null one through its serializer."""
        return _serialized(self.key, key, "key"), _serialized(self.value, value, "value")


def _serialized(serializer: Serializer | None, data: Any, what: str) -> Any:
    """`serializer(data)`; its failure is an InvalidRecordError naming the serializer (nothing is sent)."""
    if serializer is None or data is None:
        return data
    try:
        return serializer(data)
    except Exception as exc:  # noqa: BLE001 (user code: any failure refuses this record alone)
        raise InvalidRecordError(f"{what}_serializer failed on this record ({type(exc).__name__}: {exc}); "
                                 "nothing was sent") from exc


class Deserializers:
    """A consumer's key and value deserializers (either may be None: that part stays bytes)."""

    def __init__(self, key: Deserializer | None, value: Deserializer | None) -> None:
        takes = "a function of the stored bytes (e.g. json.loads)"
        self.key = _checked("key_deserializer", key, takes)
        self.value = _checked("value_deserializer", value, takes)

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
                                               value=vd(r.value) if vd and r.value is not None else r.value,
                                               stored_sizes=(r.serialized_key_size, r.serialized_value_size)))
            except Exception as exc:  # noqa: BLE001 (user code: name the record it failed on)
                raise InvalidArgumentError(
                    f"a deserializer failed on {r.topic}-{r.partition} offset {r.offset} ({type(exc).__name__}: "
                    f"{exc}); seek past it with seek({r.topic!r}, {r.partition}, {r.offset + 1})") from exc
        return out
