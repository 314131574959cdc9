"""A process caches the topic metadata it reads (SqliteCoordinator, under the metadata version every write
transaction replaces): when another process alters, deletes, re-creates or grows a topic, this process's next
call sees it. The other process is a peer script fed admin commands on its stdin, one per line."""
from __future__ import annotations

import subprocess
import sys

import pytest

import fabric
from fabric.common.errors import InvalidRecordError, RecordTooLargeError, UnknownPartitionError, UnknownTopicError

PEER = r"""
import sys
import fabric
fab = fabric.connect(sys.argv[1])
print("ready", flush=True)
for line in sys.stdin:
    op, topic, *args = line.split()
    if op == "alter":
        fab.alter_topic_config(topic, dict(a.split("=") for a in args))
    elif op == "delete":
        fab.delete_topic(topic)
    elif op == "create":
        fab.create_topic(topic, int(args[0]))
    elif op == "partitions":
        fab.create_partitions(topic, int(args[0]))
    print("done", flush=True)
"""


class Admin:
    """Another process with the same fabric open."""

    def __init__(self, root: str) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", PEER, root], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)
        assert self.answer() == "ready"

    def answer(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        assert line, f"the peer exited ({self.process.wait()})"
        return line

    def __call__(self, command: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        assert self.answer() == "done"


@pytest.fixture
def fab_admin(tmp_path):
    root = str(tmp_path / "fabric")
    fab = fabric.connect(root)
    fab.create_topic("t", 2)
    admin = Admin(root)
    yield fab, admin
    admin.process.kill()
    admin.process.wait()
    fab.close()


def sent(fab, topic: str, value: bytes, partition: int = 0, key: bytes | None = None) -> int:
    with fab.producer() as producer:
        return producer.send(topic, value, key=key, partition=partition).get().offset


def test_a_config_another_process_alters_holds_at_our_next_append(fab_admin) -> None:
    fab, admin = fab_admin
    cluster = fab.cluster
    assert sent(fab, "t", b"x" * 2000) == 0
    assert cluster.coordinator.topic("t").config == {}  # cached now
    admin("alter t max.message.bytes=1000")
    with pytest.raises(RecordTooLargeError, match="max.message.bytes=1000"):
        sent(fab, "t", b"x" * 2000)
    admin("alter t cleanup.policy=compact")
    with pytest.raises(InvalidRecordError, match="needs a key"):
        sent(fab, "t", b"keyless")
    assert sent(fab, "t", b"keyed", key=b"k") == 1
    assert cluster.coordinator.topic("t").config == {"max.message.bytes": "1000", "cleanup.policy": "compact"}


def test_a_topic_another_process_deletes_is_unknown_at_our_next_append(fab_admin) -> None:
    fab, admin = fab_admin
    assert sent(fab, "t", b"a") == 0
    admin("delete t")
    with pytest.raises(UnknownTopicError):
        sent(fab, "t", b"b")


def test_a_topic_another_process_deletes_and_creates_again_is_the_new_one(fab_admin) -> None:
    fab, admin = fab_admin
    for i in range(3):
        assert sent(fab, "t", b"old", partition=1) == i
    admin("delete t")
    admin("create t 1")
    with pytest.raises(UnknownPartitionError):
        sent(fab, "t", b"new", partition=1)
    assert sent(fab, "t", b"new", partition=0) == 0
    admin("partitions t 3")
    assert sent(fab, "t", b"grown", partition=2) == 0
    with fab.consumer(auto_offset_reset="earliest") as consumer:
        consumer.assign([("t", p) for p in range(3)])
        got = consumer.poll(10.0)
    assert sorted(r.value for r in got) == [b"grown", b"new"]
