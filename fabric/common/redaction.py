"""What an error message or a log line may show of an input: never a secret (the token of a fabric:// URL, the
password of user:password@host), never all of a large input.
"""
from __future__ import annotations

import re
from typing import Any

SECRET_QUERY_KEYS = ("token", "password")
MASK = "***"
_QUERY_SECRET = re.compile(r"([?&;](?:" + "|".join(SECRET_QUERY_KEYS) + r")=)[^&#;]*", re.IGNORECASE)
_USERINFO = re.compile(r"(//[^/?#@:]*:)[^/?#@]*@")


def redact_url(url: Any) -> str:
    """`url` as text with the values of secret query keys and a userinfo password replaced by ***."""
    return _USERINFO.sub(rf"\g<1>{MASK}@", _QUERY_SECRET.sub(rf"\g<1>{MASK}", str(url)))


def shorten(text: str, limit: int = 120) -> str:
    """`text` cut to `limit` characters, saying how long it was."""
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


def clip(value: Any, limit: int = 80) -> str:
    """`repr(value)` cut to `limit` characters, for messages that must never echo a whole input."""
    return shorten(repr(value), limit)
