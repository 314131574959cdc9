"""What a Kafka user's hands type first at the `fabric` command, run as real subprocesses: `--version`,
Kafka's `--bootstrap-server host:port` for a coordinator service's fabric:// URL, and the tools' lines with their
action flags and `--topic` / `--group`."""
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


def test_kafka_tools_lines_typed_from_memory_work_on_file_url(fabric_cli, tmp_path) -> None:
    """kafka-topics, kafka-console-producer/-consumer and kafka-consumer-groups as their users type them, action
    flag and --topic / --group included, each line given to `fabric` with only the tool's name changed."""
    url = f"file://{tmp_path / 'fab'}"

    def ok(*line: str, stdin: str = "") -> str:
        done = fabric_cli("--url", url, *line, stdin=stdin)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert ok("topics", "--create", "--topic", "orders", "--partitions", "2", "--replication-factor", "1") \
        == "Created topic orders.\n"
    assert ok("topics", "--list").split() == ["orders"]
    ok("topics", "--alter", "--topic", "orders", "--partitions", "3")
    assert len(fabric.connect(url).describe_topic("orders").partitions) == 3
    ok("produce", "--topic", "orders", stdin="a\nb\n")
    assert sorted(ok("consume", "--topic", "orders", "--from-beginning", "--group", "billing", "--max-messages",
                     "2").split()) == ["a", "b"]
    assert "Empty" in ok("groups", "--describe", "--group", "billing", "--state")
    ok("groups", "--reset-offsets", "--group", "billing", "--topic", "orders", "--to-earliest", "--execute")
    assert {o.committed for o in fabric.connect(url).describe_group("billing")} == {0}
    assert "Successful" in ok("groups", "--delete-offsets", "--group", "billing", "--topic", "orders")
    assert fabric.connect(url).describe_group("billing") == []
    ok("consume", "--topic", "orders", "--from-beginning", "--group", "audit", "--max-messages", "1")
    nothing = fabric_cli("--url", url, "groups", "--delete")
    assert nothing.returncode == 1 and "or --all-groups; one of them" in nothing.stderr, nothing.stderr
    assert ok("groups", "--delete", "--all-groups") == "Deleted consumer group 'audit'.\n"
    assert fabric.connect(url).list_groups() == []
    ok("topics", "--delete", "--topic", "orders")
    assert fabric.connect(url).list_topics() == []

    both = fabric_cli("--url", url, "topics", "--create", "--delete", "--topic", "x")
    assert both.returncode == 1 and "--create and --delete given" in both.stderr and "Traceback" not in both.stderr


def test_console_tools_client_configs(fabric_cli, tmp_path) -> None:
    """--producer-property / --consumer-property, --consumer.config, --request-required-acks and
    --isolation-level, as Kafka's console producer and consumer take them; the group of group.id commits what
    was printed, unless enable.auto.commit=false."""
    url = f"file://{tmp_path / 'fab'}"
    fabric.connect(url).create_topic("orders")
    sent = fabric_cli("--url", url, "produce", "--topic", "orders", "--request-required-acks", "1",
                      "--producer-property", "linger.ms=0", "client.id=cli", stdin="a\nb\nc\n")
    assert sent.returncode == 0, sent.stderr
    config = tmp_path / "consumer.properties"
    config.write_text("# as Kafka's --consumer.config\nmax.poll.records=1\nauto.offset.reset=earliest\n")
    read = fabric_cli("--url", url, "consume", "--topic", "orders", "--consumer.config", str(config),
                      "--consumer-property", "group.id=billing", "--isolation-level", "read_uncommitted",
                      "--max-messages", "2")
    assert read.returncode == 0 and read.stdout.split() == ["a", "b"], read.stderr
    again = fabric_cli("--url", url, "consume", "--topic", "orders", "--from-beginning", "--max-messages", "3",
                       "--consumer-property", "group.id=audit", "enable.auto.commit=false")
    assert again.returncode == 0 and again.stdout.split() == ["a", "b", "c"], again.stderr
    with fabric.connect(url) as fab:
        assert [o.committed for o in fab.describe_group("billing")] == [2]
        assert "audit" not in fab.list_groups()

    for line, message in [
        (("--consumer-property", "max.poll.records=0"), "invalid value '0' for consumer config 'max.poll.records'"),
        (("--consumer-property", "group.id=a", "--group", "b"), "--group and the config group.id=a disagree"),
        (("--consumer-property", "enable.auto.commit=maybe"), "enable.auto.commit=maybe: expected true or false"),
    ]:
        bad = fabric_cli("--url", url, "consume", "--topic", "orders", "--max-messages", "1", *line)
        assert bad.returncode == 1 and message in bad.stderr and "Traceback" not in bad.stderr, bad.stderr


def test_console_consumer_include_reads_every_matching_topic(fabric_cli, tmp_path) -> None:
    """kafka-console-consumer --include REGEX (--whitelist, its old name): every topic whose name matches."""
    url = f"file://{tmp_path / 'fab'}"
    with fabric.connect(url) as fab:
        for topic in ("orders-eu", "orders-us", "refunds"):
            fab.create_topic(topic)
            with fab.producer() as producer:
                producer.send(topic, topic.encode())
    read = fabric_cli("--url", url, "consume", "--include", "orders-.*", "--from-beginning", "--exit-at-end",
                      "--group", "all-orders")
    assert read.returncode == 0 and sorted(read.stdout.split()) == ["orders-eu", "orders-us"], read.stderr
    old = fabric_cli("--url", url, "consume", "--whitelist", "ref.*", "--from-beginning", "--max-messages", "1")
    assert old.returncode == 0 and old.stdout.split() == ["refunds"], old.stderr
    both = fabric_cli("--url", url, "consume", "refunds", "--include", "orders-.*")
    assert both.returncode == 1 and "or every topic matching a regular expression with --include" in both.stderr
