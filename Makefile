# TiDB-Binlog in Python.  `make demo` runs the local playground, `make test` the tests.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# Test files run on this many pytest-xdist workers, each file whole on one worker (0: in this process).
PYTEST_WORKERS ?= 2

.PHONY: test demo proto lint typecheck unit clean bench

# One venv for every target: the test extra pulls in the spark, playground (etcd for demo) and dev
# (grpcio-tools for proto, ruff, mypy) extras; resolving that reference to the project's own extras
# takes pip 21.2 or later, hence the upgrade first.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

test: $(STAMP)
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

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache playground-data
