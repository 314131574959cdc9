"""The notebooks' Spark session helper without starting Spark: the project's spark-defaults.conf is parsed,
bad lines are named, and a missing conf directory is reported before any JVM starts."""
from __future__ import annotations

import pytest

from fabric.common.errors import InvalidConfigError
from fabric.spark.session import SPARK_DEFAULTS, conf_dir_path, read_spark_defaults, spark_session


def test_spark_defaults_are_parsed_and_bad_lines_named(tmp_path):
    confs = read_spark_defaults(conf_dir_path() / SPARK_DEFAULTS)
    assert confs["spark.master"] == "local[2]" and confs["spark.driver.bindAddress"] == "127.0.0.1"
    bad = tmp_path / SPARK_DEFAULTS
    bad.write_text("# comment\nspark.master\tlocal[1]\nspark.ui.enabled\n")
    with pytest.raises(InvalidConfigError, match=r":3: 'spark.ui.enabled' has no value; write `key value`"):
        read_spark_defaults(bad)


def test_spark_session_names_a_missing_conf_file(tmp_path):
    with pytest.raises(InvalidConfigError, match=r"missing .*spark-defaults.conf; pass conf_dir="):
        spark_session("no-conf", conf_dir=str(tmp_path))
