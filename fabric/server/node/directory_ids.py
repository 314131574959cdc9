"""The ids a data node writes into its data directory, so that a directory is never served as another's: the node's
id (`__fabric/node.id`: a directory belongs to one node) and, in each topic's directory, the id of the topic its
logs belong to (`topic.id`: a topic deleted and created again under its name is another topic, Kafka's topic ids).
Each is a one-line file written whole (a temporary file renamed over it)."""
from __future__ import annotations

import os

from fabric.common.errors import InvalidConfigError
from fabric.storage.durable import replace_file

NODE_ID_FILE = "node.id"
TOPIC_ID_FILE = "topic.id"  # in each topic directory: the id of the topic its logs belong to


def _write(path: str, text: str) -> None:
    replace_file(path, f"{text}\n".encode(), durably=False)


def claim(internal_dir: str, root: str, node_id: int) -> None:
    """Mark the data directory `root` (its internal directory `internal_dir`) as node `node_id`'s, unless it is
    already; InvalidConfigError if it is another node's."""
    path = os.path.join(internal_dir, NODE_ID_FILE)
    if os.path.exists(path):
        with open(path) as handle:
            owner = handle.read().strip()
        if owner != str(node_id):
            raise InvalidConfigError(f"data directory {root} belongs to node {owner}, not node {node_id}; start it "
                                     f"with --id {owner}, or give this node its own --data")
        return
    _write(path, str(node_id))


def stored_topic_id(topic_dir: str) -> str | None:
    """The topic id written in `topic_dir`; None if none is."""
    try:
        with open(os.path.join(topic_dir, TOPIC_ID_FILE)) as handle:
            return handle.read().strip()
    except FileNotFoundError:
        return None


def write_topic_id(topic_dir: str, topic_id: str) -> None:
    """Write `topic_id` as the id of the topic whose logs are in `topic_dir` (created if need be)."""
    os.makedirs(topic_dir, exist_ok=True)
    _write(os.path.join(topic_dir, TOPIC_ID_FILE), topic_id)
