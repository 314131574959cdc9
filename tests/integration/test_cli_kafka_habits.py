"""What a Kafka user's hands type first at the `fabric` command, run as real subprocesses: `--version`, and
Kafka's `--bootstrap-server host:port` for a coordinator service's fabric:// URL."""
from __future__ import annotations

from importlib.metadata import version

import fabric


def test_version_is_the_installed_distributions(fabric_cli) -> None:
    done = fabric_cli("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"fabric (spark-fabric) {version('spark-fabric')}"
    assert fabric.__version__ == version("spark-fabric")


def test_bootstrap_server_reaches_the_service_as_url_does(fabric_cli, coordinators) -> None:
    service = coordinators()
    created = fabric_cli("topics", "create", "orders", "--partitions", "2", "--bootstrap-server", service.address)
    assert created.returncode == 0, created.stderr
    listed = fabric_cli("--bootstrap-server", service.address, "topics", "list")
    assert listed.returncode == 0 and "orders" in listed.stdout.split(), listed.stderr
    assert len(fabric.connect(service.url()).describe_topic("orders").partitions) == 2


def test_a_bootstrap_server_without_a_port_is_refused_naming_the_form(fabric_cli) -> None:
    done = fabric_cli("--bootstrap-server", "localhost", "topics", "list")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "--bootstrap-server expects host:port[,host:port], got 'localhost'" in done.stderr
