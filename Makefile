# popmq developer commands. `make run` and `make test` work on a fresh machine: they call
# `make setup`, which creates .venv and installs everything the project needs.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
SETUP_STAMP := $(VENV)/.setup-stamp
COMPILE_STAMP := $(VENV)/.compile-stamp
COMPILED_SOURCES := $(shell $(PYTHON) src/popmq/_compiled.py)
BUF := tools/node_modules/.bin/buf
BUF_STAMP := tools/node_modules/.install-stamp
LISTEN ?= 127.0.0.1:8081
DATA_DIR ?= ./data

.PHONY: setup compile run test test-python check lint fmt typecheck gen gen-check bench bench-peers browser example clean

setup: $(SETUP_STAMP) $(BUF_STAMP) bench-peers browser
	@tools/install_etcd.sh

$(SETUP_STAMP): pyproject.toml setup.py src/popmq/_compiled.py
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[spark,test,dev,bench]'
	@touch $@ $(COMPILE_STAMP)

$(BUF_STAMP): tools/package.json
	cd tools && npm install --silent --no-audit --no-fund
	@touch $@

# Rebuild the mypyc-compiled modules in place (setup.py, src/popmq/_compiled.py) after editing
# one (make test does it first): until then popmq imports all of them as Python.
# POPMQ_PURE_PYTHON=1 at build time (make setup) compiles nothing; at run time it imports the
# Python sources of a compiled build.
compile: $(COMPILE_STAMP)

$(COMPILE_STAMP): $(COMPILED_SOURCES) | $(SETUP_STAMP)
	$(PY) setup.py --quiet build_ext --inplace
	@touch $@

run: $(SETUP_STAMP)
	$(VENV)/bin/popmq serve --listen $(LISTEN) --data-dir $(DATA_DIR)

# Three workers on two cores: most tests wait on servers, subprocesses and timers, not the CPU.
# The Spark tests that share a SparkSession run in turn on one worker (tests/spark/conftest.py).
# Tests marked `alone` measure a server's memory, which the other workers' load would inflate:
# they run afterwards, by themselves.
TEST_WORKERS ?= 3

test: setup $(COMPILE_STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup -m "not alone"
	$(PY) -m pytest -q -m alone

# The same build's Python sources (POPMQ_PURE_PYTHON=1, src/popmq/_compiled.py) through the
# tests that cover the compiled modules: the unit tests and the integration tests of sends,
# pops, acks and their streams. A fraction of `make test`'s time, and no second build.
PYTHON_TESTS := tests/unit $(addprefix tests/integration/test_,pop_semantics.py pop_stream.py \
	send_stream.py acks_on_receive.py message_features_sdk.py validation.py request_limits.py) \
	$(addprefix tests/cluster/test_,hop_stream_frames.py hop_send_frames.py broker_hop_stream.py)

test-python: setup
	POPMQ_PURE_PYTHON=1 $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup $(PYTHON_TESTS)

lint: setup
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	$(BUF) lint
	$(BUF) format -d --exit-code

typecheck: setup
	$(VENV)/bin/mypy

fmt: setup
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .
	$(BUF) format -w

gen: setup
	$(PY) tools/gen_protos.py

# Benchmark peers (redis-server, nats-server) from Debian's packages; best effort here (the
# bench's --quick mode skips their rows without them), required by `make bench`.
bench-peers:
	@tools/install_peers.sh

# The headless Chromium of the console's browser tests (tests/console), from Debian's
# package; best effort here (those tests skip, naming the missing binary, without it).
browser:
	@tools/install_browser.sh

# The side-by-side run against Redis and NATS (~15 min): writes docs/benchmarks.md and docs/benchmarks.png.
bench: setup compile
	tools/install_peers.sh --require
	$(PY) -m bench.report

# The Spark example pipeline (examples/spark_orders_pipeline.py) on an embedded server.
example: setup
	$(PY) examples/spark_orders_pipeline.py

gen-check: setup
	$(PY) -m pytest -q tests/unit/test_generated_code.py

check: lint typecheck gen-check test

clean:
	rm -rf $(VENV) tools/node_modules .pytest_cache .mypy_cache .ruff_cache build
	find broker_core proxy src -name '*.so' -delete
