"""The client suite runs against every kind of cluster: clients must not care which they talk to."""
from __future__ import annotations

import pytest

import fabric


@pytest.fixture(params=["file", "fabric"])
def fab(request, coordinators, fabric_dir):
    """The same client API over an embedded fabric (file://) and over a coordinator service process serving the
    same kind of directory (fabric://)."""
    url = f"file://{fabric_dir}" if request.param == "file" else coordinators(fabric_dir).url()
    with fabric.connect(url) as handle:
        yield handle
