"""The service calls a store's methods with the request's arguments by name (fabric/server/service.py), so every
Coordinator implementation must name its parameters as the interface does: a store that renames one fails only
when a client calls it through the service."""
from __future__ import annotations

import inspect

import pytest

from fabric.client.remote import RemoteCoordinator
from fabric.coordinator.interface import Coordinator
from fabric.coordinator.sqlite_store import SqliteCoordinator
from fabric.coordinator.zk_store import ZkCoordinator

METHODS = sorted(name for name, member in vars(Coordinator).items() if getattr(member, "__isabstractmethod__", False))


@pytest.mark.parametrize("implementation", [SqliteCoordinator, ZkCoordinator, RemoteCoordinator])
def test_every_coordinator_names_its_parameters_as_the_interface(implementation) -> None:
    differing = {name: (list(inspect.signature(getattr(Coordinator, name)).parameters),
                        list(inspect.signature(getattr(implementation, name)).parameters))
                 for name in METHODS}
    assert {name: pair for name, pair in differing.items() if pair[0] != pair[1]} == {}
    assert "commit_transaction" in METHODS
