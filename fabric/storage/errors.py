"""What the storage layer does when a partition's directory cannot be written (a read-only or full disk, or a
directory of another user): reads go on, writes fail with a StorageError (fabric.errors) naming the partition
and the fix."""
from __future__ import annotations

import errno
import functools
from typing import Any, Callable, TypeVar, cast

from fabric.common.errors import StorageError

# What a write to a read-only, full or foreign directory fails with.
UNWRITABLE = frozenset({errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT})
_Write = TypeVar("_Write", bound=Callable[..., Any])


def writes(method: _Write) -> _Write:
    """Turn a write's failure on an unwritable directory into a StorageError naming the partition (the
    object's `name` and `directory`) and the fix."""
    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except OSError as exc:
            if exc.errno not in UNWRITABLE:
                raise
            raise StorageError(f"partition {self.name} cannot be written ({exc.strerror}: "
                               f"{exc.filename or self.directory}); free disk space or make the directory "
                               "writable by this user, then retry") from exc
    return cast(_Write, wrapper)
