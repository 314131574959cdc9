"""Runs the Python examples of README.md and of docs/ as tests (Sybil), so every example a reader copies works.

Each page's Python blocks run in order and share one namespace, as a reader pasting them into one session would.
A page gets an embedded fabric and a working directory of its own ($FABRIC_URL names a fresh file:// fabric;
relative paths land in a fresh directory), so examples can call `fabric.connect()` and create the topics they
name. A block that cannot run here is preceded by `<!-- skip: next "why" -->`, which pytest reports as a skip
with that reason. Only the files pytest is pointed at are read (`testpaths` names README.md and docs/).
"""
from __future__ import annotations

from typing import Iterator

import pytest
from sybil import Sybil
from sybil.parsers.markdown import PythonCodeBlockParser, SkipParser


@pytest.fixture(scope="module")
def docs_scene(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One page's scene: a fresh embedded fabric as $FABRIC_URL and a fresh working directory, both undone after
    the page (a Sybil document is one pytest module)."""
    home = tmp_path_factory.mktemp("docs")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FABRIC_URL", f"file://{home / 'fabric'}")
        patch.chdir(home)
        yield str(home)


pytest_collect_file = Sybil(
    parsers=[PythonCodeBlockParser(), SkipParser()],
    patterns=["*.md"],
    fixtures=["docs_scene"],
).pytest()
