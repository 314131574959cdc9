"""A node's data directory id (Kafka's meta.properties `directory.id`): made once, when the directory is first
served, and kept in `__fabric/directory.id`. A node sends it with every registration, so the controller tells a
restart of the node on its own directory (which fences the old process) from another process claiming the id
(refused while the id's lease is alive). A wiped or replaced disk gets a new id.
"""
from __future__ import annotations

import logging
import os
import uuid

from fabric.common.errors import InvalidConfigError
from fabric.common.redaction import clip
from fabric.coordinator.disk import disk_errors
from fabric.coordinator.validation import DIRECTORY_ID
from fabric.storage.durable import replace_file
from fabric.storage.log_manager import INTERNAL_DIR

log = logging.getLogger(__name__)
DIRECTORY_ID_FILE = "directory.id"


def directory_id(data_dir: str) -> str:
    """The id of `data_dir`, whose lock the caller holds: read from its file, or made (a random UUID) and written
    durably the first time."""
    path = os.path.join(data_dir, INTERNAL_DIR, DIRECTORY_ID_FILE)
    with disk_errors(data_dir, "read the data directory's id"):
        try:
            with open(path) as handle:
                found = handle.read().strip()
        except FileNotFoundError:
            found = uuid.uuid4().hex
            replace_file(path, f"{found}\n".encode())
            log.info("data directory %s: new directory id %s", data_dir, found)
    if not DIRECTORY_ID.fullmatch(found):
        raise InvalidConfigError(f"{path} holds {clip(found)}, not a data directory id; remove the file to give "
                                 "the directory a new id (the controller then takes it for another disk)")
    return found
