"""The fabric's JVM reader for Spark (`format("fabric-jvm")`, sources/jvm): its jar, built with `javac` against
pyspark's own jars (no Maven, no download) into the fabric.sources package, which ships it.

`python -m fabric.spark.jar` prints the jar's path (building it from a checkout where it is missing) for
`spark.jars`; `--build` builds it again. A machine with a Java runtime but no `javac` gets no jar, and says so:
format("fabric"), the Python source, reads everything without it.
"""
from __future__ import annotations

import argparse
import glob
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Sequence

from fabric.common.errors import FabricError

JAR = "fabric-spark-jvm.jar"
log = logging.getLogger(__name__)


def package_dir() -> Path:
    """Where the jar lives: the fabric.sources package's directory (the checkout's sources/ under an editable
    install, whose package files link to it), found without importing the package (it is the layer above)."""
    spec = importlib.util.find_spec("fabric.sources")
    assert spec is not None and spec.origin is not None  # fabric.sources ships with fabric
    return Path(spec.origin).resolve().parent


def path() -> Path | None:
    """The jar, if it was built."""
    jar = package_dir() / JAR
    return jar if jar.is_file() else None


def with_reader(jars: str | None = None) -> str:
    """A spark.jars value: `jars` (comma-separated), and the reader's jar where it was built."""
    reader = path()
    return ",".join(filter(None, (jars, str(reader) if reader is not None else None)))


def spark_jars() -> str:
    """pyspark's jars, the class path the reader compiles against (found without importing pyspark)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise FabricError("pyspark is not installed: the fabric JVM reader compiles against its jars")
    return os.path.join(list(spec.submodule_search_locations)[0], "jars", "*")


def build() -> Path | None:
    """Compile sources/jvm into the jar (replacing it); None, with a warning, where there is no javac or no
    Java source (an installed wheel ships the jar it was built with)."""
    root = package_dir() / "jvm"
    sources = sorted(str(p) for p in root.rglob("*.java"))
    javac = shutil.which("javac")
    if javac is None or not sources:
        log.warning("the fabric JVM reader is not built: %s; format(\"fabric\") reads with the Python source",
                    "javac (a JDK) is not on PATH" if javac is None else f"no Java sources under {root}")
        return None
    if not glob.glob(spark_jars()):
        raise FabricError(f"pyspark's jars are missing ({spark_jars()}): reinstall pyspark")
    with tempfile.TemporaryDirectory() as classes:
        done = subprocess.run([javac, "--release", "17", "-nowarn", "-cp", spark_jars(), "-d", classes, *sources],
                              capture_output=True, text=True)
        if done.returncode:
            raise FabricError(f"javac could not compile the fabric JVM reader:\n{done.stderr[-4000:]}")
        jar = package_dir() / JAR
        partial = jar.with_suffix(".partial")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as out:
            out.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: fabric.spark.jar\n")
            for directory in (Path(classes), root):
                for file in sorted(directory.rglob("*")):
                    name = file.relative_to(directory).as_posix()
                    if file.is_file() and (name.endswith(".class") or name.startswith("META-INF/services/")):
                        out.write(file, name)
        os.replace(partial, jar)
    return jar


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fabric.spark.jar", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", action="store_true", help="compile the jar again from sources/jvm")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    jar = build() if args.build or path() is None else path()
    if jar is None:
        return 0 if args.build else 1  # (make install goes on without it; the warning said why)
    print(jar)
    return 0


if __name__ == "__main__":
    sys.exit(main())
