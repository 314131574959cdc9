"""A loss of partitions (the member's session ended: they may already be another member's) calls on_lost where
one was given, else on_revoke, in each client's form; the partitions come as fabric.TopicPartition objects."""
from __future__ import annotations

from fabric.client.rebalance_callbacks import RebalanceCallbacks
from fabric.client.topic_partition import TopicPartition


def test_a_loss_calls_on_lost_else_on_revoke_in_each_form() -> None:
    heard: list = []
    me = object()
    confluent = RebalanceCallbacks.given(me, None, lambda c, p: heard.append(("revoke", c, p)), None, None, "g")
    assert confluent is not None
    confluent.lost([("orders", 1)])
    with_lost = RebalanceCallbacks.given(me, None, lambda c, p: heard.append(("revoke", c, p)),
                                         lambda c, p: heard.append(("lost", c, p)), None, "g")
    assert with_lost is not None
    with_lost.lost([("orders", 2)])

    class Listener:
        def on_partitions_assigned(self, assigned: list) -> None:
            heard.append(("assigned", assigned))

        def on_partitions_revoked(self, revoked: list) -> None:
            heard.append(("revoked", revoked))

        def on_partitions_lost(self, lost: list) -> None:
            heard.append(("listener lost", lost))
    listener = RebalanceCallbacks.given(me, None, None, None, Listener(), "g")
    assert listener is not None
    listener.lost([("orders", 3)])
    RebalanceCallbacks.own(None, lambda p: heard.append(("own revoke", p)), "g").lost([("orders", 4)])
    assert heard == [("revoke", me, [("orders", 1)]), ("lost", me, [("orders", 2)]),
                     ("listener lost", [("orders", 3)]), ("own revoke", [("orders", 4)])]
    assert all(isinstance(tp, TopicPartition) for _, *rest in heard for tp in rest[-1])
    assert RebalanceCallbacks.given(me, None, None, None, None, "g") is None  # (none given: the consumer's stay)
