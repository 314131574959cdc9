"""A SparkSession configured from the fabric's conf/ (spark-defaults.conf, log4j2.properties), installed as
package data, and waiting on a condition while watching a streaming query."""
from __future__ import annotations

import os
import sys
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from fabric.client.url import ENV_URL
from fabric.common.errors import InvalidConfigError
from fabric.common.waiting import wait_for
from fabric.spark import jar
from fabric.spark.options import CLIENT_RACK_CONF, ENV_CLIENT_RACK, URL_CONF

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery


CONF_PACKAGE = "fabric.conf"  # the repository's conf/, installed with the package
SPARK_DEFAULTS = "spark-defaults.conf"
LOG4J2 = "log4j2.properties"


def conf_dir_path() -> Path:
    """The directory of the installed defaults (the repository's conf/)."""
    return Path(str(resources.files(CONF_PACKAGE).joinpath(SPARK_DEFAULTS))).parent


def read_spark_defaults(path: Path) -> dict[str, str]:
    """The `key value` pairs of a spark-defaults.conf file (blank lines and # comments skipped)."""
    confs = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 1)
        if len(parts) != 2:
            raise InvalidConfigError(f"{path}:{number}: {line!r} has no value; write `key value`, "
                                     "e.g. `spark.sql.shuffle.partitions 2`")
        confs[parts[0]] = parts[1].strip()
    return confs


def spark_session(app: str, conf_dir: str | None = None) -> SparkSession:
    """A SparkSession configured by conf_dir's spark-defaults.conf and log4j2.properties (default: the
    project's conf/), with the environment Spark's Python workers need, the fabric confs made to reach the
    fabric format (use_fabric_confs), and the JVM reader's jar (fabric.spark.jar) where it was built."""
    directory = Path(conf_dir) if conf_dir else conf_dir_path()
    defaults, log4j = directory / SPARK_DEFAULTS, directory / LOG4J2
    for path in (defaults, log4j):
        if not path.is_file():
            raise InvalidConfigError(f"missing {path}; pass conf_dir= a directory holding {SPARK_DEFAULTS} "
                                     f"and {LOG4J2} (the project's are in {conf_dir_path()})")
    # Spark's Python workers cannot connect back in sandboxes without these (see README).
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    confs = read_spark_defaults(defaults)
    if os.environ.get(ENV_URL):  # the fabric the user points at wins over the file's default
        confs["spark.fabric.url"] = os.environ[ENV_URL]
    jars = jar.with_reader(confs.get("spark.jars"))  # with the JVM reader, format("fabric-jvm"), where built
    if jars:
        confs["spark.jars"] = jars
    java_options = confs.get("spark.driver.extraJavaOptions", "")
    confs["spark.driver.extraJavaOptions"] = f"{java_options} -Dlog4j2.configurationFile={log4j.resolve()}".strip()
    builder = SparkSession.builder.appName(app)
    for key, value in confs.items():
        builder = builder.config(key, value)
    return use_fabric_confs(builder.getOrCreate())


def use_fabric_confs(spark: SparkSession) -> SparkSession:
    """Make the session's spark.fabric.url and spark.fabric.clientRack reach the fabric source and sink, and
    return the session. pyspark runs a Python data source's driver-side code (schema, planning, commits) in a
    Python worker without a session or its confs; a source registered through the session gets the session's
    Python environment there (and on executors), so the confs are copied into it as $FABRIC_URL and
    $FABRIC_CLIENT_RACK and `fabric` is registered explicitly."""
    from pyspark_fabric import DefaultSource

    for conf, variable in ((URL_CONF, ENV_URL), (CLIENT_RACK_CONF, ENV_CLIENT_RACK)):
        value = spark.conf.get(conf, None)
        if value:
            spark.sparkContext.environment[variable] = value
    spark.dataSource.register(DefaultSource)
    return spark


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 120.0,
               query: StreamingQuery | None = None) -> None:
    """Poll `condition` until it holds; fail naming `what` on timeout, or at once if `query` failed."""
    def holds() -> bool:
        if query is not None and query.exception() is not None:
            raise RuntimeError(f"streaming query failed while waiting for {what}: {query.exception()}")
        return bool(condition())
    wait_for(holds, timeout_s, what, interval=0.2)
