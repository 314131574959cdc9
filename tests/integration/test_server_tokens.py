"""A server process never takes its token from its command line, which every user of the machine reads (`ps`,
/proc/PID/cmdline): a data node given `--coordinator fabric://...?token=` refuses to start and names the fix
(--token-file, token.file or $FABRIC_TOKEN) without echoing the token. `fabric cluster up`'s processes are checked
in test_cluster.py (test_a_local_cluster_in_one_command)."""
from __future__ import annotations

import os

import pytest

from fabric.server.launcher import NodeProcess


def test_a_node_given_a_token_on_its_command_line_refuses_to_start_and_names_the_fix(tmp_path) -> None:
    secret = "node-s3cret-" + os.urandom(4).hex()
    node = NodeProcess(1, str(tmp_path / "node"), f"fabric://127.0.0.1:1?token={secret}")
    with pytest.raises(RuntimeError, match="node exited with 1") as refused:
        node.start(timeout=60)  # it refuses before it calls any coordinator
    message = str(refused.value)
    assert "error: --coordinator 'fabric://127.0.0.1:1?token=***' carries ?token=" in message, message
    assert "--token-file FILE (token.file), or set $FABRIC_TOKEN" in message, message
    assert "Traceback" not in message and secret not in message, message
