"""Secrets never reach an error message or a log line: the token of a fabric:// URL (however malformed the rest
of it is) and the lines of a tokens file (malformed, or given where the ACL or config file belongs)."""
from __future__ import annotations

import argparse
import logging

import pytest

import fabric
from fabric.cli.main import main as cli
from fabric.common.errors import InvalidConfigError
from fabric.server.instance import settings_from
from fabric.server.security import load_acls, load_tokens

SECRET = "s3cr3t-TOKEN-value"


@pytest.mark.parametrize("url", [f"fabric://h:1?token={SECRET}&timeout_ms=abc",
                                 f"fabric://h:x?token={SECRET}", f"fabric://h:1?token={SECRET}&tokn=1",
                                 f"fabrik://h:1?token={SECRET}", f"fabric://u:{SECRET}@h:x"])
def test_a_bad_fabric_url_is_reported_without_its_token(url, capsys, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    with pytest.raises(InvalidConfigError) as raised:
        fabric.connect(url)
    assert SECRET not in str(raised.value)
    assert cli(["--url", url, "topics", "list"]) == 1
    captured = capsys.readouterr()
    assert captured.err.startswith("error: ") and SECRET not in captured.err + captured.out
    assert SECRET not in caplog.text


def test_malformed_or_misplaced_tokens_files_never_print_a_token(tmp_path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{SECRET} admin extra\n")
    with pytest.raises(InvalidConfigError, match="tokens:1: a tokens line has 2 fields") as raised:
        load_tokens(str(tokens))
    assert SECRET not in str(raised.value)
    tokens.write_text(f"# token principal\n{SECRET} admin\n")
    with pytest.raises(InvalidConfigError, match="tokens:2: an ACL line has 3 fields") as raised:
        load_acls(str(tokens))  # the tokens file given as --acl-file
    assert SECRET not in str(raised.value) and "is this the ACL file?" in str(raised.value)
    args = argparse.Namespace(config=str(tokens), **{k: None for k in (
        "listen", "advertise", "store", "data_dir", "tokens_file", "acl_file", "tls_cert", "tls_key",
        "max_partitions", "shutdown_timeout_ms")})
    with pytest.raises(InvalidConfigError, match="expected key=value") as raised:
        settings_from(args)  # the tokens file given as --config
    assert SECRET not in str(raised.value)


@pytest.mark.parametrize("url, problem", [
    ("fabric://127.0.0.1:70000", "the port from 1 to 65535"), ("fabric://127.0.0.1:0", "the port from 1 to 65535"),
    ("fabric://127.0.0.1:9093?timeout_ms=-5", "must be a positive integer"),
    ("fabric://127.0.0.1:9093?timeout_ms=0", "must be a positive integer"),
])
def test_an_impossible_port_or_timeout_in_a_fabric_url_is_refused_by_name(url, problem) -> None:
    with pytest.raises(InvalidConfigError, match=problem):
        fabric.connect(url)
