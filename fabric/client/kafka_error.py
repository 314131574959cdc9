"""confluent-kafka's KafkaError: an error as a value (its code, name and reason), with the codes a confluent-kafka
program compares `msg.error().code()` and `err.args[0].code()` against, librdkafka's own (negative, from
`_BAD_MSG` to `_LOG_TRUNCATION`) and Kafka's protocol errors. The fabric raises its errors as exceptions
(fabric.errors: KafkaException is the base of all of them); this class makes a program that imports and compares
these names run."""
from __future__ import annotations

import builtins
from typing import Any

from fabric.common.kafka_codes import CODES, ErrorText
from fabric.common.kafka_codes import NAMES as _NAMES


class KafkaError:
    """An error as confluent-kafka gives it to a program: `KafkaError(code, reason)`, with code(), name(), str(),
    fatal(), retriable() and txn_requires_abort(); equal to another of the same code and to the code itself."""

    def __init__(self, error: int, reason: str | None = None, fatal: bool = False, retriable: bool = False,
                 txn_requires_abort: bool = False) -> None:
        self._code, self._reason = int(error), reason
        self._fatal, self._retriable, self._abort = fatal, retriable, txn_requires_abort

    @classmethod
    def of(cls, exc: BaseException) -> KafkaError:
        """The value confluent-kafka reports for `exc` (a delivery callback's `err`): a fabric error's code,
        message and flags, from its ErrorText; any other exception as _FAIL, naming its type."""
        text = exc.args[0] if exc.args else None
        if isinstance(text, ErrorText):
            return cls(text.code(), text.str(), text.fatal(), text.retriable(), text.txn_requires_abort())
        return cls(CODES["_FAIL"], f"{type(exc).__name__}: {exc}")

    def code(self) -> int:
        return self._code

    def name(self) -> str:
        return _NAMES.get(self._code, f"ERR_{self._code}")

    def str(self) -> str:
        """The reason, else the code's name (confluent-kafka's human-readable string)."""
        return self._reason or self.name()

    def fatal(self) -> bool:
        return self._fatal

    def retriable(self) -> bool:
        return self._retriable

    def txn_requires_abort(self) -> bool:
        return self._abort

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, KafkaError):
            return self._code == other._code
        return isinstance(other, int) and self._code == other

    def __hash__(self) -> int:
        return hash(self._code)

    def __str__(self) -> builtins.str:  # (`str` is the method above within the class)
        return self.str()

    def __repr__(self) -> builtins.str:
        return f"KafkaError{{code={self.name()},val={self._code},str=\"{self.str()}\"}}"


for _code, _name in _NAMES.items():
    setattr(KafkaError, _name, _code)
