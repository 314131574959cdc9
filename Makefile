# Spark Fabric: `make demo` and `make test` work on a fresh machine (they create .venv and install).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

# Spark's Python workers cannot connect back in sandboxes without these (see README, Environment).
export SPARK_LOCAL_IP := 127.0.0.1
export PYSPARK_PYTHON := $(abspath $(BIN))/python
export PYSPARK_DRIVER_PYTHON := $(abspath $(BIN))/python

.PHONY: install test demo bench check-java clean

install: $(STAMP)

$(STAMP): pyproject.toml | check-java
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo ">> installing spark-fabric and its dependencies into $(VENV) (first run: ~2 minutes)"
	@$(BIN)/python -m pip install --quiet --upgrade pip
	@# compat mode puts the checkout on sys.path, so Spark's pkgutil scan finds pyspark_fabric (format("fabric"))
	@$(BIN)/python -m pip install --quiet -e '.[dev]' --config-settings editable_mode=compat
	@touch $(STAMP)

check-java:
	@command -v java >/dev/null 2>&1 || { echo "error: Java 17+ is required by Spark and ZooKeeper but 'java' is not on PATH; install it (Debian/Ubuntu: sudo apt-get install openjdk-17-jre-headless) and re-run" >&2; exit 1; }
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	 if [ -z "$$v" ] || [ "$$v" -lt 17 ]; then echo "error: Java $$v found, Spark 4 needs Java 17+; install openjdk-17-jre-headless and re-run" >&2; exit 1; fi

test: $(STAMP)
	$(BIN)/python -m pytest -q

demo: $(STAMP)
	$(BIN)/python jobs/demo.py

bench: $(STAMP)
	$(BIN)/python -m bench.run

clean:
	rm -rf $(VENV) fabric-data demo-data .pytest_cache bench/results
