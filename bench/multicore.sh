#!/bin/bash
# The benchmarks that say whether the cores bound a figure, on a lent 16-core machine (docs/performance.md,
# "16 cores against 2"): each suite on all cores, then pinned to 2 (taskset pins every process it starts).
#
#   bash bench/multicore.sh kit     here: build .devkit/ (about 48 MB), what that machine lacks
#   bash bench/multicore.sh run     there, from the checkout root with .devkit/ beside it; writes to $OUT
#
# That machine has Python 3.12 but no Java and no network. The kit brings pyarrow (its wheel less the parts the
# fabric does not load, so that all of it travels within 64 MB), the fabric's other compiled dependencies, and a
# Java runtime cut down by jlink to the modules ZooKeeper uses, with ZooKeeper's jars from pyspark's: then the
# cases that need ZooKeeper (coordinator instances sharing the groups) run there too.
set -u
KIT=.devkit

kit() {
    set -e
    local jars work
    jars=$(dirname "$(.venv/bin/python -c 'from fabric.server.zookeeper import pyspark_jars; print(pyspark_jars())')")
    work=$(mktemp -d)
    grep -qx "/$KIT/" .git/info/exclude 2>/dev/null || echo "/$KIT/" >> .git/info/exclude
    rm -rf "$KIT" && mkdir -p "$KIT"
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform manylinux1_x86_64 -d "$work/wheels" pyarrow==26.0.1 crc32c==2.9.post0 kazoo==2.11.0 \
        argcomplete==3.7.2 msgspec==0.22.0 uvloop==0.23.0
    mv "$work"/wheels/{crc32c,kazoo,argcomplete,msgspec,uvloop}-*.whl "$KIT/"
    .venv/bin/pip wheel -q --no-deps --no-build-isolation . -w "$KIT"
    (cd "$work" && unzip -q wheels/pyarrow-*.whl && cd pyarrow \
        && rm -rf include includes tests src libarrow_s3.so* _s3fs* _orc* _hdfs* _gcsfs* _azurefs* \
                  libarrow_python.so libarrow_python.so.*.*.* \
        && find . \( -name "*.pyx" -o -name "*.pxd" -o -name "*.h" \) -delete)
    (cd "$work" && tar cJf - pyarrow pyarrow-*.dist-info) > "$KIT/pyarrow.txz"
    mkdir -p "$work/java/zkcp"
    jlink --add-modules java.base,java.management,java.naming,java.security.jgss,java.security.sasl,jdk.management,jdk.unsupported \
        --strip-debug --no-header-files --no-man-pages --output "$work/java/jre"
    for jar in zookeeper-3 zookeeper-jute slf4j-api audience-annotations commons-io metrics-core snappy-java; do
        cp "$jars/$jar"*.jar "$work/java/zkcp/"
    done
    (cd "$work/java" && tar cJf - jre zkcp) > "$KIT/java.txz"
    rm -rf "$work"
    du -sh "$KIT"
}

run() {
    export PYTHONUNBUFFERED=1
    local budget=${BUDGET:-520} start zk=""
    start=$(date +%s)
    left() { echo $(( budget - ($(date +%s) - start) )); }
    say() { echo "[$(date +%H:%M:%S) +$(( $(date +%s) - start ))s] $*"; }
    mkdir -p /tmp/site /tmp/kit
    tar xJf "$KIT/pyarrow.txz" -C /tmp/site && tar xJf "$KIT/java.txz" -C /tmp/kit || exit 3
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$KIT"/*.whl || exit 4
    # fabric.server.zookeeper finds ZooKeeper's jars in pyspark's: a stand-in package holding only those
    mkdir -p /tmp/site/pyspark && : > /tmp/site/pyspark/__init__.py && ln -sfn /tmp/kit/zkcp /tmp/site/pyspark/jars
    export PATH=/tmp/kit/jre/bin:$PATH PYTHONPATH=$PWD:/tmp/site
    nproc; python3 --version
    python3 -c "from fabric.server.zookeeper import ZooKeeperServer; import tempfile; \
ZooKeeperServer(root=tempfile.mkdtemp()).start().close()" >/dev/null 2>&1 || zk="--without-zookeeper"
    say "ZooKeeper: ${zk:-runs}"
    suite() {  # NAME OUT PIN ARGS...: one suite, bounded by what is left of the budget
        local name=$1 out=$2 pin=$3 t
        shift 3
        t=$(left)
        if [ "$t" -lt 40 ]; then say "skipped $out: ${t}s left"; return; fi
        say "$out (${t}s left)"
        FABRIC_BENCH_RESULTS=/tmp/res/$out timeout $(( t - 10 )) $pin python3 -m "bench.$name" "$@" > "$OUT/$out.txt" 2>&1
        say "$out: exit $?"
        pkill -9 -f "fabric.server.(service|node)"; pkill -9 -f ZooKeeperServerMain
        tar czf "$OUT/results.tgz" -C /tmp res
    }
    local offsets=(--seconds 2 $zk)
    local cluster=(--records 300000 --repeats 2 --rounds 2 --seconds 2 --warmup 0.5 --failovers 1)
    suite offsets_bench offsets16 "" "${offsets[@]}"
    suite offsets_bench offsets2 "taskset -c 0,1" "${offsets[@]}"
    suite cluster_bench cluster16 "" "${cluster[@]}"
    suite cluster_bench cluster2 "taskset -c 0,1" "${cluster[@]}"
    suite offsets_bench offsets16n6 "" "${offsets[@]}" --nodes 6 --instances 6
    suite append_bench append2 "taskset -c 0,1" --records 3000 --rounds 3 --seconds 2
    say "done"
}

case "${1:-}" in
    kit) kit ;;
    run) run ;;
    *) echo "usage: bash bench/multicore.sh kit|run" >&2; exit 2 ;;
esac
