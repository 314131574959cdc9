"""Secrets never reach an error message or a log line: the token of a fabric:// URL (however malformed the rest
of it is) and the lines of a tokens file (malformed, or given where the ACL or config file belongs). Nor a
command line: a server refuses a token there and takes its own from a token file or $FABRIC_TOKEN; the client
CLI warns of one and takes it from --command-config's file."""
from __future__ import annotations

import argparse
import logging

import pytest

import fabric
from fabric.cli.common import CommandError, client_url
from fabric.cli.main import build_parser
from fabric.cli.main import main as cli
from fabric.common.errors import InvalidConfigError
from fabric.server.connection import server_token
from fabric.server.instance import settings_from
from fabric.server.node.settings import add_node_arguments, node_settings_from
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
    # (one error line; a thread another test left may log beside it, so it need not be the last line)
    assert len([line for line in captured.err.splitlines() if line.startswith("error: ")]) == 1
    assert SECRET not in captured.err + captured.out
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


def node_settings(*argv: str):
    parser = argparse.ArgumentParser()
    add_node_arguments(parser)
    return node_settings_from(parser.parse_args(["--id", "1", *argv]))


def test_a_node_refuses_a_token_on_its_command_line_and_takes_one_from_a_file_or_the_environment(
        tmp_path, monkeypatch) -> None:
    with pytest.raises(InvalidConfigError, match=r"--coordinator 'fabric://h:1\?token=\*\*\*' carries \?token=.*"
                                                 r"--token-file FILE \(token.file\), or set \$FABRIC_TOKEN") as raised:
        node_settings("--coordinator", f"fabric://h:1?token={SECRET}")
    assert SECRET not in str(raised.value)
    (tmp_path / "node-token").write_text(f"# the node's own token\n{SECRET}\n")
    config = tmp_path / "node.properties"
    config.write_text("node.coordinator=fabric://h:1\ntoken.file=node-token\n")
    settings = node_settings("--config", str(config))
    assert settings.token_file == str(tmp_path / "node-token")  # relative to the config file
    monkeypatch.setenv("FABRIC_TOKEN", "from-the-environment")
    assert server_token(settings.token_file) == SECRET  # the file wins over the environment
    assert server_token(None) == "from-the-environment"
    monkeypatch.delenv("FABRIC_TOKEN")
    assert server_token(None) is None


def test_a_token_file_given_the_tokens_file_is_refused_without_showing_it(tmp_path) -> None:
    (tmp_path / "tokens").write_text(f"{SECRET} admin\n")
    with pytest.raises(InvalidConfigError, match="a token line has 1 fields") as raised:
        server_token(str(tmp_path / "tokens"))
    assert SECRET not in str(raised.value)
    (tmp_path / "tokens").write_text(f"{SECRET}\n{SECRET}-2\n")
    with pytest.raises(InvalidConfigError, match="must hold one token on one line, it holds 2") as raised:
        server_token(str(tmp_path / "tokens"))
    assert SECRET not in str(raised.value)


def cli_args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args([*argv, "topics", "list"])


def test_the_cli_warns_of_a_token_in_its_url_and_takes_one_from_command_config(tmp_path, capsys) -> None:
    """As Kafka's tools, the client CLI takes its connection settings from --command-config FILE; a token in
    --url still works but is warned of (ps and the shell history show it), without being echoed."""
    assert client_url(cli_args("--url", f"fabric://h:1?token={SECRET}")) == f"fabric://h:1?token={SECRET}"
    warning = capsys.readouterr().err
    assert warning.startswith("warning: --url carries ?token=") and "--command-config FILE" in warning
    assert SECRET not in warning
    config = tmp_path / "client.properties"
    config.write_text(f"token={SECRET}\ntimeout_ms=5000\n")
    assert client_url(cli_args("--url", "fabric://h:1,h:2", "--command-config", str(config))) == \
        f"fabric://h:1,h:2?token={SECRET}&timeout_ms=5000"
    assert client_url(cli_args("--url", "fabric+tls://h:1?tls=true", "--command-config", str(config))) == \
        f"fabric+tls://h:1?tls=true&token={SECRET}&timeout_ms=5000"
    assert capsys.readouterr().err == ""
    config.write_text(f"sasl.password={SECRET}\n")
    with pytest.raises(CommandError, match="unknown key.*takes the fabric:// URL's options: token, tls") as raised:
        client_url(cli_args("--url", "fabric://h:1", "--command-config", str(config)))
    assert SECRET not in str(raised.value)
    config.write_text(f"token={SECRET}\n")
    with pytest.raises(CommandError, match="is an embedded fabric, which takes none"):
        client_url(cli_args("--url", str(tmp_path / "embedded"), "--command-config", str(config)))
