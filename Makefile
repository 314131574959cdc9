# Spark Fabric: `make demo` and `make test` work on a fresh machine (they create .venv and install).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
LINKS  := $(VENV)/.linked-stamp
# The package's files: the install is redone when one is added, removed or renamed (edits need nothing).
SOURCES := $(shell git ls-files -co --exclude-standard fabric coordinator sources sinks conf pyspark_fabric.py 2>/dev/null)
# Lint and type checks read the installed tree, where coordinator/, sources/ and sinks/ are fabric.* packages
# (bench/, jobs/ and docs/scripts/, outside the wheel, are checked from the checkout with the tree first on mypy's
# path).
TREE = $(firstword $(wildcard build/__editable__.spark_fabric-*))

# Python caches compiled modules (__pycache__) under every target, whatever the shell says: with
# PYTHONDONTWRITEBYTECODE set, each process of the tests (nodes, coordinators, CLI runs, Spark's Python workers)
# compiled the package's modules again, about 0.25 s of CPU per process start.
unexport PYTHONDONTWRITEBYTECODE

# Spark's Python workers cannot connect back in sandboxes without these (see README, Environment).
export SPARK_LOCAL_IP := 127.0.0.1
export PYSPARK_PYTHON := $(abspath $(BIN))/python
export PYSPARK_DRIVER_PYTHON := $(abspath $(BIN))/python

.PHONY: install lint docs test test-fast demo demo-cluster notebook bench check-java clean

JAR := sources/fabric-spark-jvm.jar
JAVA_SOURCES := $(shell find sources/jvm -type f 2>/dev/null)

install: $(LINKS) $(JAR)

# The JVM reader (format("fabric-jvm")), compiled with javac against pyspark's jars; without javac the warning
# says so and everything else works (format("fabric") is the Python source).
$(JAR): $(JAVA_SOURCES) | $(LINKS)
	@$(BIN)/python -m fabric.spark.jar --build >/dev/null

# Dependencies (and the project) when pyproject.toml changes.
$(STAMP): pyproject.toml Makefile | check-java
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo ">> installing spark-fabric and its dependencies into $(VENV) (first run: ~2 minutes)"
	@$(BIN)/python -m pip install --quiet --upgrade pip "setuptools>=77" wheel
	@$(BIN)/python -m pip install --quiet -e '.[dev]' --config-settings editable_mode=strict
	@touch $(STAMP)

# The project alone when one of its files is added, removed or renamed: strict editable mode installs a tree
# of links to the checkout's files under the fabric.* names the wheel has (edits show at once, new files not).
$(LINKS): $(STAMP) $(VENV)/.files
	@$(BIN)/python -m pip install --quiet --no-deps -e . --config-settings editable_mode=strict 2>/dev/null
	@touch $(LINKS)

$(VENV)/.files: FORCE
	@mkdir -p $(VENV)
	@echo "$(SOURCES)" | cmp -s - $@ || echo "$(SOURCES)" > $@

FORCE:

check-java:
	@command -v java >/dev/null 2>&1 || { echo "error: Java 17+ is required by Spark and ZooKeeper but 'java' is not on PATH; install it (Debian/Ubuntu: sudo apt-get install openjdk-17-jre-headless) and re-run" >&2; exit 1; }
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	 if [ -z "$$v" ] || [ "$$v" -lt 17 ]; then echo "error: Java $$v found, Spark 4 needs Java 17+; install openjdk-17-jre-headless and re-run" >&2; exit 1; fi

lint: install
	$(BIN)/ruff check .
	cd $(TREE) && $(abspath $(BIN))/lint-imports --config $(CURDIR)/pyproject.toml
	cd $(TREE) && $(abspath $(BIN))/mypy --config-file $(CURDIR)/pyproject.toml -p fabric -p pyspark_fabric
	MYPYPATH=$(TREE) $(BIN)/mypy --config-file pyproject.toml bench jobs docs/scripts

# The documentation site (mkdocs.yml, docs/) into build/site; --strict fails it on a broken link, reference or
# docstring. The configuration reference is generated from the code at each build. The two variables silence
# banners that Material for MkDocs and a plugin print about MkDocs' future on every build.
docs: install
	NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(BIN)/mkdocs build --strict --quiet

# Three pytest workers, a test file each at a time (its module fixtures shared): most tests wait on processes,
# ZooKeeper or Spark, and with two workers the 2 cores of CI's machine were idle a fifth of the time (vmstat); a
# third keeps them busy and took the suite from 26:48 to 23:34 in two runs back to back. Every test waits on
# conditions, so the contention only slows them. TEST_WORKERS=0 runs them serially.
TEST_WORKERS ?= 3
# The Python examples of README.md and docs/ run as tests too (pyproject's testpaths, the root conftest.py). The
# 25 slowest tests are listed at the end, to keep the suite's time in view.
test: lint docs
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=25

test-fast: install
	$(BIN)/pytest -q tests/unit

demo: install
	$(BIN)/python jobs/demo.py

# The demo on a local coordinator and 3 data nodes (replication factor 3), stopped afterwards, also on failure.
demo-cluster: install
	$(BIN)/python jobs/demo_cluster.py

# Jupyter on notebooks/, exploring the embedded fabric the demo writes (./fabric-data) unless FABRIC_URL is set.
notebook: install
	FABRIC_URL=$${FABRIC_URL:-file://$(CURDIR)/fabric-data} $(BIN)/jupyter notebook --notebook-dir=notebooks

bench: $(LINKS)
	$(BIN)/python -m bench.run

clean:
	rm -rf $(VENV) build fabric-data demo-data .pytest_cache bench/results $(JAR)
