"""The coordinator service's security files (tokens, ACLs) and its shipped configuration, read without a
service running: bad lines are named with their fix. (The service enforcing them:
tests/integration/test_service.py.)"""
from __future__ import annotations

import argparse
import os

import pytest

import fabric
from fabric.common.errors import InvalidConfigError
from fabric.server.instance import PROPERTIES, settings_from
from fabric.server.security import load_acls, load_tokens


def test_bad_security_files_name_the_line_and_the_fix(tmp_path) -> None:
    acls, tokens = tmp_path / "acls", tmp_path / "tokens"
    acls.write_text("# comment\napp delete topic:orders\n")
    with pytest.raises(InvalidConfigError, match=r"acls:2: unknown operation 'delete'; use one of read, write"):
        load_acls(str(acls))
    acls.write_text("app read orders\n")
    with pytest.raises(InvalidConfigError, match="must be topic:NAME, topic:\\*, group:NAME or group:\\*"):
        load_acls(str(acls))
    tokens.write_text("t1 alice\nt1 bob\n")
    with pytest.raises(InvalidConfigError, match="tokens:2: token listed twice"):
        load_tokens(str(tokens))
    with pytest.raises(InvalidConfigError, match="unknown; known: token, tls, ca, timeout_ms"):
        fabric.connect("fabric://127.0.0.1:1?tokn=x")


@pytest.mark.parametrize("query, why", [
    ("timeout_ms=99999999999999999999999", "must be a positive integer number of milliseconds up to 2147483647"),
    ("timeout_ms=2147483648", "up to 2147483647"),
    ("tls=on", "tls in .* must be true or false, got 'on'; or name the scheme fabric\\+tls://"),
    ("tls=2", "must be true or false"),
])
def test_absurd_url_options_are_refused_naming_the_fix(query, why) -> None:
    """A timeout past Kafka's int32 was taken, then overflowed a wait on the socket (OverflowError); tls=on was
    read as false, connecting in plaintext."""
    with pytest.raises(InvalidConfigError, match=why):
        fabric.connect(f"fabric://127.0.0.1:1?{query}")


def test_shipped_config_is_valid(repo_root) -> None:
    config = os.path.join(repo_root, "conf", "fabric.properties")
    args = argparse.Namespace(config=config, **{k: None for k in ("listen", "advertise", "store", "data_dir",
                                                                   "tokens_file", "acl_file", "tls_cert", "tls_key")})
    settings = settings_from(args)
    assert settings.tokens_file == os.path.join(repo_root, "conf", "tokens")
    assert set(load_tokens(settings.tokens_file).values()) == {"admin", "app"}
    assert load_acls(settings.acl_file)
    assert "auth.tokens.file" in PROPERTIES
