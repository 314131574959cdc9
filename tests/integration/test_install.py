"""The wheel as users get it: built from the checkout, holding the fabric package (coordinator/, sources/ and
sinks/ as fabric.*, the shipped conf, the JVM reader's jar where it was built) and pyspark_fabric, nothing else;
installed into a fresh venv, where the `fabric` command works and Spark finds `format("fabric")` by itself, run
from outside the checkout."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VENV_PYTHON = sys.executable
pytestmark = [pytest.mark.spark, pytest.mark.slow]


def run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    """Run `cmd`; fail the test with its output unless it succeeds; its stdout."""
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{cmd} failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return done.stdout


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without anything pointing Python at the checkout or another install."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    return {**env, **extra}


def unmet_build_requirements() -> list[str]:
    """pyproject.toml's [build-system] requires this venv does not meet (`name` or `name>=version` entries)."""
    block = re.search(r"^\[build-system\]\s*requires\s*=\s*\[(.*?)\]", (REPO / "pyproject.toml").read_text(),
                      re.MULTILINE | re.DOTALL)
    unmet = []
    for requirement in re.findall(r'"([^"]+)"', block[1] if block else ""):
        name, _, minimum = (part.strip() for part in requirement.partition(">="))
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            unmet.append(f"{requirement} (not installed)")
            continue
        number = lambda v: tuple(int(x) for x in re.findall(r"\d+", v)[:3])
        if minimum and number(have) < number(minimum):
            unmet.append(f"{requirement} (have {have})")
    return unmet


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The project's wheel, built from the checkout with the project venv's build tools."""
    unmet = unmet_build_requirements()
    assert not unmet, (f"the project venv cannot build the wheel without build isolation: it lacks {unmet} "
                       "from pyproject.toml's [build-system] requires; install them into the venv")
    out = tmp_path_factory.mktemp("wheel")
    run([VENV_PYTHON, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", out, REPO], cwd=out,
        env=clean_env())
    [built] = out.glob("spark_fabric-*.whl")
    return built


def test_the_wheel_holds_the_package_and_nothing_else(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    for expected in ("fabric/__init__.py", "fabric/coordinator/zk_store.py", "fabric/sources/fabric_source.py",
                     "fabric/sinks/fabric_sink.py", "fabric/conf/spark-defaults.conf", "pyspark_fabric.py"):
        assert expected in names, f"{expected} missing from {wheel.name}"
    if (REPO / "sources" / "fabric-spark-jvm.jar").is_file():  # make install built the JVM reader: it ships
        assert "fabric/sources/fabric-spark-jvm.jar" in names
    assert not [n for n in names if n.endswith(".java")]  # its sources do not
    for package in ("fabric/coordinator/", "fabric/sources/", "fabric/sinks/"):
        assert any(n.startswith(package) for n in names), package
    top = {n.split("/", 1)[0] for n in names if "/" in n}
    assert not top & {"coordinator", "sources", "sinks", "jobs", "bench", "tests", "conf", "notebooks"}, top
    assert {t for t in top if not t.endswith(".dist-info")} == {"fabric"}, top


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A fresh venv with the wheel installed (not editable); its python."""
    tmp_path = tmp_path_factory.mktemp("installed")
    fresh = tmp_path / "venv"
    run([VENV_PYTHON, "-m", "venv", fresh], cwd=tmp_path, env=clean_env())
    python = fresh / "bin" / "python"
    # The project venv's dependencies (pyspark, pyarrow, ...) without reinstalling them: its site-packages on the
    # fresh venv's path. .pth files in a directory added this way are not processed, so the project's own
    # editable install there (a .pth file) stays invisible; the wheel is the only fabric.
    site = Path(run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp_path,
                    env=clean_env()).strip())
    (site / "project-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run([python, "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed", wheel], cwd=tmp_path,
        env=clean_env())  # ignore (never touch) the project venv's own spark-fabric, visible through the .pth
    return python


def test_the_installed_wheel_works_from_outside_the_checkout(installed, tmp_path):
    python, bin_dir = installed, installed.parent
    fresh = bin_dir.parent
    data = tmp_path / "fabric-data"
    env = clean_env(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=str(python), PYSPARK_DRIVER_PYTHON=str(python))
    assert "Created topic t" in run([bin_dir / "fabric", "--url", f"file://{data}", "topics", "create", "t"],
                                    cwd=tmp_path, env=env)
    assert run([bin_dir / "fabric", "--url", f"file://{data}", "topics", "list"], cwd=tmp_path, env=env).split() \
        == ["t"]

    script = tmp_path / "read_back.py"
    script.write_text(textwrap.dedent(f"""
        import os, sys
        import fabric
        from pyspark.sql import SparkSession

        assert os.path.realpath(fabric.__file__).startswith(os.path.realpath({str(fresh)!r}) + os.sep), \\
            fabric.__file__
        url = {f"file://{data}"!r}
        with fabric.connect(url) as fab, fab.producer() as producer:
            for i in range(3):
                producer.send("t", b"value-%d" % i).result()
        spark = (SparkSession.builder.master("local[1]").appName("installed-wheel")
                 .config("spark.ui.enabled", "false").config("spark.driver.bindAddress", "127.0.0.1")
                 .getOrCreate())
        rows = spark.read.format("fabric").option("url", url).option("subscribe", "t").load().collect()
        spark.stop()
        values = sorted(bytes(r.value) for r in rows)
        assert values == [b"value-0", b"value-1", b"value-2"], values
        print("read", len(values), "records with", fabric.__file__)
    """))
    out = run([python, script], cwd=tmp_path, env=env)
    assert "read 3 records with" in out and str(fresh) in out


def test_a_notebook_runs_on_the_installed_wheel_outside_the_checkout(installed, notebooks, tmp_path):
    """explore_topics in a kernel on the fresh venv's python, whose fabric is the wheel's (conf/ included)."""
    nb = notebooks.run("explore_topics.ipynb", tmp_path, python=str(installed), env=clean_env())
    connect = next(c for c in nb.cells if c.get("id") == "connect")
    assert "data nodes: none" in "".join(o.get("text", "") for o in connect.outputs)
    probe = run([installed, "-c", "import fabric.notebook; print(fabric.notebook.__file__)"], cwd=tmp_path,
                env=clean_env())
    assert probe.startswith(str(installed.parent.parent)), probe
