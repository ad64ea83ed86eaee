# Developer entry points.
#   make test    the whole suite against real Elasticsearch, Redis and PostgreSQL,
#                started (and stopped afterwards) by scripts/services.sh, once on
#                SQLite and once on PostgreSQL (TEST_DATABASES="sqlite postgres");
#                extra pytest arguments: make test PYTEST_ARGS="-k ingest -x"
#   make run     the portal with demo data on http://127.0.0.1:8000/ (SQLite,
#                eager Celery: no other service needed); HOST=0.0.0.0 PORT=8080
#                serve elsewhere, PUBLIC_BASE_URL follows them unless set;
#                DEMO_ARTICLES=2000 sizes the demo set. Installs requirements.txt only.
#   make lint    ruff check, ruff format --check and mypy (all app code)
#   make bench   the benchmarks at full size (bench/README.md); bench-smoke: small, for CI
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# One stamp per requirements file: each installs again only when its file changes.
RUN_STAMP := $(VENV)/.requirements-run.stamp
DEV_STAMP := $(VENV)/.requirements-dev.stamp
ES_PORT ?= 9200
REDIS_PORT ?= 6379
PG_PORT ?= 5433
export ES_PORT REDIS_PORT PG_PORT
PYTEST_ARGS ?=
TEST_DATABASES ?= sqlite postgres
export TEST_DATABASES

# make run: where it serves, and the address every document names.
HOST ?= 127.0.0.1
PORT ?= 8000
DEMO_ARTICLES ?= 2000
# An IPv6 address goes in brackets in URLs; 0.0.0.0 and :: (every interface)
# are no address to publish, so documents name this machine's host name.
url_host = $(if $(findstring :,$(1)),[$(1)],$(1))
PUBLIC_HOST ?= $(if $(filter 0.0.0.0 ::,$(HOST)),$(shell hostname),$(call url_host,$(HOST)))
PUBLIC_BASE_URL ?= http://$(PUBLIC_HOST):$(PORT)
# The host PUBLIC_BASE_URL names, as ALLOWED_HOSTS spells it.
public_base_host = $(shell echo '$(PUBLIC_BASE_URL)' | sed -E 's,^[a-z]+://([^/@]*@)?(\[[^]]*\]|[^/:]*).*,\2,')
ALLOWED_HOSTS ?= $(public_base_host),$(call url_host,$(HOST)),127.0.0.1,localhost
run: export PUBLIC_BASE_URL := $(PUBLIC_BASE_URL)
run: export ALLOWED_HOSTS := $(ALLOWED_HOSTS)

.PHONY: help venv install install-run test run lint bench bench-smoke services-start services-stop services-status

help:
	@echo "make install | test [PYTEST_ARGS=...] | run [HOST=... PORT=...] | lint | bench | bench-smoke | services-start | services-stop | services-status"

# install-run: what serving needs; install: that and the test, lint and bench tools.
install-run: $(RUN_STAMP)
venv install: $(DEV_STAMP)

$(BIN)/python:
	$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "Python >= 3.11 needed")'
	$(PYTHON) -m venv $(VENV)

$(RUN_STAMP): requirements.txt | $(BIN)/python
	$(BIN)/python -m pip install --disable-pip-version-check -q -r requirements.txt
	touch $@

$(DEV_STAMP): requirements-dev.txt $(RUN_STAMP)
	$(BIN)/python -m pip install --disable-pip-version-check -q -r requirements-dev.txt
	touch $@

test: install
	ELASTICSEARCH_TEST_URL=http://127.0.0.1:$(ES_PORT) \
	REDIS_TEST_URL=redis://127.0.0.1:$(REDIS_PORT)/15 \
	POSTGRES_TEST_URL=postgres://resourcesync@127.0.0.1:$(PG_PORT)/resourcesync \
	scripts/services.sh run scripts/test.sh $(PYTEST_ARGS)

run: install-run
	$(BIN)/python manage.py migrate
	$(BIN)/python manage.py load_demo --articles $(DEMO_ARTICLES)
	@echo
	@echo "Portal:       $(PUBLIC_BASE_URL)/"
	@echo "Admin:        $(PUBLIC_BASE_URL)/admin/"
	@echo "ResourceSync: $(PUBLIC_BASE_URL)/.well-known/resourcesync"
	@echo "API docs:     $(PUBLIC_BASE_URL)/api/docs/"
	@echo "Health:       $(PUBLIC_BASE_URL)/healthz"
	@echo
	$(BIN)/python manage.py runserver $(call url_host,$(HOST)):$(PORT)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# Their own Elasticsearch, Redis and PostgreSQL ports, so a test suite can run
# beside them; the database-dependent items run on each of BENCH_DATABASES.
BENCH_PORTS = --es-port $(BENCH_ES_PORT) --redis-port $(BENCH_REDIS_PORT) \
	--pg-port $(BENCH_PG_PORT) --databases $(BENCH_DATABASES)
BENCH_ES_PORT ?= 9260
BENCH_REDIS_PORT ?= 6399
BENCH_PG_PORT ?= 5460
BENCH_DATABASES ?= sqlite,postgres

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
