"""The `fabric` command's parser: a client command loads none of the servers' modules (they add the storage and
replication layers, ZooKeeper's client and SQLite to every run), and the server commands still take all their
options, added when the command is parsed (fabric.cli.common.defer_arguments)."""
from __future__ import annotations

import subprocess
import sys

from fabric.cli.main import build_parser

SERVER_MODULES = ("fabric.server.instance", "fabric.server.node", "fabric.storage.log", "kazoo")


def test_a_client_command_loads_no_server_module() -> None:
    probe = ("import sys; from fabric.cli.main import build_parser; build_parser().parse_args(['topics', 'list']); "
             f"print(sorted(m for m in sys.modules if m.startswith({SERVER_MODULES!r})))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_server_commands_take_their_options_when_parsed() -> None:
    coordinator = build_parser().parse_args(["coordinator", "start", "--listen", "127.0.0.1:9093", "--max-partitions",
                                             "50"])
    assert (coordinator.listen, coordinator.max_partitions, coordinator.log_level_default) == \
        ("127.0.0.1:9093", "50", "INFO")
    node = build_parser().parse_args(["node", "start", "--id", "3", "--rack", "r1"])
    assert (node.node_id, node.rack, node.log_level_default) == ("3", "r1", "INFO")
    # a parser used twice (as in one process that parses two command lines) adds its options once
    again = build_parser()
    assert again.parse_args(["node", "start", "--id", "4"]).node_id == "4"
