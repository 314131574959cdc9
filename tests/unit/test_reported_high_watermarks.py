"""A node's heartbeats report only the high watermarks that moved since the controller heard them
(fabric/server/node/node.py, ReportedHighWatermarks), and all of them to a controller of another epoch."""
from __future__ import annotations

from fabric.server.node.node import ReportedHighWatermarks


def test_a_heartbeat_reports_what_moved_since_the_controller_heard_it_and_everything_to_a_new_controller() -> None:
    reported = ReportedHighWatermarks()
    first = {("t", 0): 5, ("t", 1): 7}
    assert reported.changed(first, 3) == first  # nothing heard yet
    reported.heard(first, 3)
    assert reported.changed(first, 3) == {}  # idle partitions: nothing to send
    moved = {("t", 0): 6, ("t", 1): 7, ("u", 0): 0}  # t-0 moved, u-0 newly led here
    assert reported.changed(moved, 3) == {("t", 0): 6, ("u", 0): 0}
    assert reported.changed(moved, 3) == {("t", 0): 6, ("u", 0): 0}  # not answered (a failed heartbeat): again
    reported.heard(moved, 3)
    assert reported.changed({("t", 1): 7}, 3) == {}  # leadership of t-0 and u-0 lost: nothing to send
    reported.heard({("t", 1): 7}, 3)
    assert reported.changed({("t", 0): 6, ("t", 1): 7}, 3) == {("t", 0): 6}  # led again: sent again
    assert reported.changed({("t", 1): 7}, 4) == {("t", 1): 7}  # a new controller epoch hears them all
