# TiDB-Binlog in Python.  `make demo` runs the local playground, `make test` the tests.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# Test files run on this many pytest-xdist workers, each file whole on one worker (0: in this process).
PYTEST_WORKERS ?= 2

.PHONY: test demo proto lint typecheck unit clean bench sysdeps nemesis

# One venv for every target: the test extra pulls in the spark, playground (etcd for demo) and dev
# (grpcio-tools for proto, ruff, mypy) extras; resolving that reference to the project's own extras
# takes pip 21.2 or later, hence the upgrade first.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

test: $(STAMP) sysdeps
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy .
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

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
