# Developer entry points.
#   make test    the whole suite against real Elasticsearch, Redis and PostgreSQL,
#                started (and stopped afterwards) by scripts/services.sh, once on
#                SQLite and once on PostgreSQL (TEST_DATABASES="sqlite postgres");
#                extra pytest arguments: make test PYTEST_ARGS="-k ingest -x"
#   make run     the portal with demo data on http://127.0.0.1:8000/ (SQLite,
#                eager Celery: no other service needed)
#   make lint    ruff check and ruff format --check
#   make bench   the benchmarks at full size (bench/README.md); bench-smoke: small, for CI
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.requirements.stamp
ES_PORT ?= 9200
REDIS_PORT ?= 6379
PG_PORT ?= 5433
export ES_PORT REDIS_PORT PG_PORT
PYTEST_ARGS ?=
TEST_DATABASES ?= sqlite postgres
export TEST_DATABASES
RUN_URL := http://127.0.0.1:8000

.PHONY: help venv install test run lint bench bench-smoke services-start services-stop services-status

help:
	@echo "make install | test [PYTEST_ARGS=...] | run | lint | bench | bench-smoke | services-start | services-stop | services-status"

venv install: $(STAMP)

$(BIN)/python:
	$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "Python >= 3.11 needed")'
	$(PYTHON) -m venv $(VENV)

# Re-installs only when a requirements file changes.
$(STAMP): requirements.txt requirements-dev.txt | $(BIN)/python
	$(BIN)/python -m pip install --disable-pip-version-check -q -r requirements-dev.txt
	touch $@

test: install
	ELASTICSEARCH_TEST_URL=http://127.0.0.1:$(ES_PORT) \
	REDIS_TEST_URL=redis://127.0.0.1:$(REDIS_PORT)/15 \
	POSTGRES_TEST_URL=postgres://resourcesync@127.0.0.1:$(PG_PORT)/resourcesync \
	scripts/services.sh run scripts/test.sh $(PYTEST_ARGS)

run: install
	$(BIN)/python manage.py migrate
	$(BIN)/python manage.py load_demo
	@echo
	@echo "Admin:        $(RUN_URL)/admin/"
	@echo "ResourceSync: $(RUN_URL)/.well-known/resourcesync"
	@echo "API docs:     $(RUN_URL)/api/docs/"
	@echo
	$(BIN)/python manage.py runserver 127.0.0.1:8000

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Their own Elasticsearch and Redis ports, so a test suite can run beside them.
BENCH_PORTS = --es-port $(BENCH_ES_PORT) --redis-port $(BENCH_REDIS_PORT)
BENCH_ES_PORT ?= 9260
BENCH_REDIS_PORT ?= 6399

bench: install
	$(BIN)/python bench/run.py $(BENCH_PORTS)

bench-smoke: install
	$(BIN)/python bench/run.py --smoke $(BENCH_PORTS)

services-start:
	scripts/services.sh start

services-stop:
	scripts/services.sh stop

services-status:
	scripts/services.sh status
