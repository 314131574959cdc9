"""A data node's background loads of producer state (fabric/server/node/producer_state_loader.py): partitions
load one at a time in the order asked, and one whose load failed is not tried again before RETRY_S, however
often its follower's copies ask."""
from __future__ import annotations

import errno

from fabric.common.waiting import wait_for
from fabric.server.node.producer_state_loader import ProducerStateLoader


def test_a_failed_load_is_not_tried_again_before_the_retry_interval(tmp_path, storage) -> None:
    opened: list[str] = []

    def log_of(name: str, fails: bool = False):
        def opener():
            opened.append(name)
            if fails:
                raise OSError(errno.EIO, "Input/output error", str(tmp_path / name))
            plog = storage.open_log(str(tmp_path / name))
            plog.append(storage.make_batch([b"a"]))
            return plog
        return opener

    loader = ProducerStateLoader(1)
    loader.load(("t", 0), log_of("t-0", fails=True))
    loader.load(("t", 1), log_of("t-1"))
    wait_for(lambda: opened == ["t-0", "t-1"], 30, "both partitions' loads, in the order asked")
    loader.load(("t", 0), log_of("t-0 again"))  # its load failed just now: not tried again yet
    loader.load(("t", 2), log_of("t-2"))
    wait_for(lambda: "t-2" in opened, 30, "a third partition's load")
    assert opened == ["t-0", "t-1", "t-2"]
    loader.stop()
    loader.load(("t", 3), log_of("t-3"))  # stopped: nothing more is loaded
    assert opened == ["t-0", "t-1", "t-2"]
