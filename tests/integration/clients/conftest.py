"""The client suite runs against every kind of cluster: clients must not care which they talk to."""
from __future__ import annotations

import pytest

import fabric
from fabric.common.errors import GroupNotEmptyError


@pytest.fixture(params=["file", "fabric", "cluster"])
def fab(request, coordinators, fabric_dir):
    """The same client API over an embedded fabric (file://), over a coordinator service process serving the
    same kind of directory (fabric://), and over a replicated cluster of three data nodes where every topic has
    three replicas (the cluster is shared by the suite: each test's topics and groups are deleted after it)."""
    if request.param == "cluster":
        url = request.getfixturevalue("replicated_cluster").url
    else:
        url = f"file://{fabric_dir}" if request.param == "file" else coordinators(fabric_dir).url()
    with fabric.connect(url) as handle:
        yield handle
        if request.param == "cluster":
            for topic in handle.list_topics():
                handle.delete_topic(topic)
            for group in handle.list_groups():
                try:
                    handle.cluster.coordinator.delete_group(group)
                except GroupNotEmptyError:
                    pass  # a consumer the test left open: it leaves at its session timeout
