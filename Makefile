# TiDB-Binlog in Python.  `make demo` runs the local playground, `make test` the tests, `make nemesis-test`
# the nemesis tier (clusters in network namespaces under faults), `make spark-cluster-test` the Spark jobs on
# a standalone Spark cluster, `make compose-test` the docker-compose cluster and the systemd units in
# containers (tests/compose).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# Test files run on this many pytest-xdist workers, each file whole on one worker (0: in this process).  The
# tests mostly wait on their servers (one worker keeps about a third of a core busy), so 4 on 2 cores.
PYTEST_WORKERS ?= 4

.PHONY: test nemesis-test spark-cluster-test demo proto lint typecheck unit clean bench sysdeps nemesis image compose-sysdeps compose-test

# One venv for every target: the test extra pulls in the spark, playground (etcd for demo) and dev
# (grpcio-tools for proto, ruff, mypy) extras; resolving that reference to the project's own extras
# takes pip 21.2 or later, hence the upgrade first.  deploy/build_info.py writes common/_build_info.py, the
# git hash and build time of `<command> -V` (in a checkout -V shows the checkout's HEAD; common/version.py).
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) deploy/build_info.py
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# The nemesis tier: whole clusters in network namespaces under faults (about 3 minutes); `make nemesis-test`
# runs it, `make test` everything else (the nemesis suite's self-tests and checker tests included).
NEMESIS_TIER := tests/nemesis/test_nemesis.py tests/nemesis/test_stall_partition.py
# The Spark cluster tier: a standalone master and two workers (JVMs), the replay and audit commands on it, a
# worker killed during a replay (about 2.5 minutes); `make spark-cluster-test` runs it.
SPARK_CLUSTER_TIER := tests/spark/test_standalone.py tests/spark/test_cluster_replay.py

test: $(STAMP) sysdeps
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy .
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile --ignore=tests/compose --no-loadscope-reorder --durations=40 --durations-min=5 \
		$(addprefix --ignore=,$(NEMESIS_TIER) $(SPARK_CLUSTER_TIER)) $(PYTEST_ARGS)

nemesis-test: $(STAMP) sysdeps
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile $(NEMESIS_TIER) $(PYTEST_ARGS)

spark-cluster-test: $(STAMP)
	$(PY) -m pytest $(SPARK_CLUSTER_TIER) $(PYTEST_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

typecheck: $(STAMP)
	$(PY) -m mypy .

unit: $(STAMP)
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

demo: $(STAMP)
	$(VENV)/bin/binlog-playground --clean

proto: $(STAMP)
	$(PY) -m common.pb.regen

bench: $(STAMP)
	$(PY) bench/codec.py

# The nemesis tests put nodes in network namespaces and need nftables (partitions, packet loss) and faketime
# (clock skew).  As root on Debian they are installed here when missing; elsewhere the nemesis tests skip
# with the reason (and fail under CI=true).
sysdeps:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && ! { command -v nft && command -v faketime; } >/dev/null; then \
	  echo "installing nftables and faketime (apt-get) for the nemesis tests"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -q nftables faketime >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q nftables faketime >/dev/null; }; \
	fi

# A nemesis campaign: random faults between hosts (see tests/nemesis/), then the history checker.
NEMESIS_SEED   ?= $(shell date +%s)
NEMESIS_ROUNDS ?= 40
NEMESIS_HOLD   ?= 10
nemesis: $(STAMP) sysdeps
	$(PY) -m tests.nemesis.run --seed $(NEMESIS_SEED) --rounds $(NEMESIS_ROUNDS) --max-hold $(NEMESIS_HOLD)

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache playground-data

# The container engine: podman and runc from Debian when podman is missing (as root with apt-get), unless
# CONTAINER_ENGINE names another one (docker).  Every podman call of `make image` and the compose tests
# reads CONTAINERS_CONF=deploy/container/containers.conf.  iptables too: Debian 12's netavark (1.4) builds
# container networks with it and fails with "netavark: No such file or directory" without it.
compose-sysdeps:
	@if [ -z "$${CONTAINER_ENGINE:-}" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && ! { command -v podman && command -v runc && command -v iptables && test -x /usr/lib/podman/netavark; } >/dev/null; then \
	  echo "installing podman, runc, netavark, aardvark-dns and iptables (apt-get) for make image and make compose-test"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -q -o DPkg::Lock::Timeout=300 podman runc netavark aardvark-dns iptables >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q -o DPkg::Lock::Timeout=300 podman runc netavark aardvark-dns iptables >/dev/null; }; \
	fi

# tidb-binlog-py:latest and tidb-binlog-mariadb:latest from the Dockerfile, on python:3.11-slim-bookworm or,
# where that cannot be pulled, on a base built from Debian's packages (see deploy/container/build-images.sh
# for BASE_IMAGE, HOST_CA_CERTS, EXTRAS and CONTAINER_ENGINE).
image: compose-sysdeps
	deploy/container/build-images.sh

# The compose tier: podman-compose (the compose extra) in .venv, the images (layer cache: quick when
# nothing changed), then tests/compose on one process.
COMPOSE_STAMP := $(VENV)/.compose-installed
$(COMPOSE_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[test,compose]'
	touch $(COMPOSE_STAMP)

compose-test: $(COMPOSE_STAMP) compose-sysdeps image
	$(PY) -m pytest tests/compose $(PYTEST_ARGS)
