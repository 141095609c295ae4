# Development entry points for django-delayq; `make help` lists them.
#
# Everything runs from virtualenvs under .venv/, created on first use by
# tools/bootstrap.sh, which also installs redis-server and PostgreSQL from
# Debian's packages when they are missing. The tests start their own private
# servers on free ports, so nothing here needs or touches system services.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
# The steps of `make test` build on each other and share .venv/.
.NOTPARALLEL:

# Bytecode is cached under .venv for every Python process make starts (see
# tools/run_tests.sh: without a cache each process compiles Django again).
unexport PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX ?= $(CURDIR)/.venv/pycache

# Matrix legs to test; each names a Python and a Django (see tools/bootstrap.sh).
MATRIX ?= py311-dj52 py312-dj6
# Extra pytest arguments, e.g. PYTEST_ARGS='-x -k dispatch'.
PYTEST_ARGS ?=
# Lint, type checks and docs run once, in the newest leg.
LINT_LEG ?= $(lastword $(MATRIX))
# The fault-injection scenarios (tests/faults), the upgrade test
# (tests/upgrade) and the worker-process tests run once, in the last leg.
FAULTS_LEG ?= $(lastword $(MATRIX))
# The browser tests (tests/browser, headless Chromium) run once, in the last
# leg, to keep `make test` within CI's time; BROWSER_LEGS="$(MATRIX)" runs
# them in every leg (the admin's markup differs between Django versions).
BROWSER_LEGS ?= $(lastword $(MATRIX))
# The databases each leg runs the suite on: SQLite and PostgreSQL with
# Django 5.2, MariaDB with Django 6 (the fault run adds PostgreSQL on Django
# 6, the browser run SQLite). A database leg tests what differs
# on that database: SQLite runs the whole suite, PostgreSQL and MariaDB the
# tests the database decides (plus, in the Django 6 leg, which has no SQLite
# run, those the Django version decides; see tools/run_tests.sh). One Django
# version each is enough, and CI's time is kept. A leg not named here runs
# on sqlite and postgres.
LEG_DATABASES ?= py311-dj52=sqlite,postgres py312-dj6=mariadb
# The fault run: the upgrade test and the core fault scenarios on MariaDB;
# the upgrade test and every scenario on PostgreSQL (last). The upgrade test
# is about the server databases' locks while the previous release's
# processes run (SQLite's migrations are tested in the suite).
FAULT_DATABASES ?= mariadb postgres
# `make test-fast` and `make example` use the first leg.
FAST_LEG ?= $(firstword $(MATRIX))
EXAMPLE_LEG ?= $(FAST_LEG)
# The example's web server port on 127.0.0.1: make example EXAMPLE_PORT=8001.
EXAMPLE_PORT ?= 8000

BOOTSTRAP := tools/bootstrap.sh
LINT_BIN := .venv/$(LINT_LEG)/bin
export PYTEST_ARGS

.PHONY: help test test-fast tests faults browser lint typecheck docs example bench bench-quick bootstrap constraints clean distclean

help: ## Show this help
	@echo "Usage: make TARGET [MATRIX='...'] [PYTEST_ARGS='...']"
	@echo
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | \
		awk -F':.*## ' '{ printf "  %-11s %s\n", $$1, $$2 }'
	@echo
	@echo "MATRIX=\"$(MATRIX)\""

test: bootstrap lint typecheck tests docs bench-quick ## Everything CI checks: lint, mypy, tests over the matrix, docs, benchmarks (quick)
	@printf '\nTest matrix:\n'
	@cat .venv/logs/summary.txt
	@echo "make test: all checks passed"

bootstrap: ## Install missing servers and create the virtualenvs
	@$(BOOTSTRAP) $(MATRIX)

constraints: ## Upgrade: rebuild every leg (bench too) from the newest releases pyproject.toml allows and rewrite tools/constraints/; commit the result
	$(BOOTSTRAP) --refresh-constraints $(MATRIX) bench

lint: ## ruff check and ruff format --check
	@$(BOOTSTRAP) --no-servers $(LINT_LEG)
	$(LINT_BIN)/ruff check .
	$(LINT_BIN)/ruff format --check .

typecheck: ## mypy (configured in pyproject.toml)
	@$(BOOTSTRAP) --no-servers $(LINT_LEG)
	$(LINT_BIN)/mypy

tests: ## pytest (and Django's own Tasks tests, on Django 6) in every MATRIX leg on its LEG_DATABASES, tests/faults once (last leg), then tests/browser (last leg)
	@$(BOOTSTRAP) --browser $(MATRIX)
	tools/run_tests.sh --leg-dbs "$(LEG_DATABASES)" --faults $(FAULTS_LEG) \
		--fault-dbs "$(FAULT_DATABASES)" --browser "$(BROWSER_LEGS)" $(MATRIX)

faults: ## Only the fault-injection scenarios (tests/faults: all on PostgreSQL, the core ones on MariaDB) and the upgrade test (tests/upgrade, on every database), in the last leg
	@$(BOOTSTRAP) $(FAULTS_LEG)
	tools/run_tests.sh --faults $(FAULTS_LEG) --fault-dbs "$(FAULT_DATABASES)"

browser: ## Only the browser tests (tests/browser) in headless Chromium, in BROWSER_LEGS (the last leg)
	@$(BOOTSTRAP) --redis-only --browser $(BROWSER_LEGS)
	tools/run_tests.sh --browser "$(BROWSER_LEGS)"

test-fast: ## pytest in the first leg against SQLite only (pass PYTEST_ARGS)
	@$(BOOTSTRAP) --redis-only $(FAST_LEG)
	tools/run_tests.sh --dbs sqlite $(FAST_LEG)

docs: ## Build the HTML docs, warnings as errors
	@$(BOOTSTRAP) --no-servers $(LINT_LEG)
	$(LINT_BIN)/sphinx-build -W --keep-going -q -b html docs docs/_build/html
	@echo "docs: docs/_build/html/index.html"

bench: ## Benchmarks against raw redis-py and the peers (about an hour); writes docs/benchmarks.md
	@$(BOOTSTRAP) bench
	.venv/bench/bin/python -m benchmarks

bench-quick: ## The same harness with small N (a few minutes), as `make test` runs it
	@$(BOOTSTRAP) bench
	.venv/bench/bin/python -m benchmarks --quick --json .venv/logs/bench-quick.json

example: ## Run the example project with a private Redis, on EXAMPLE_PORT (8000); Ctrl-C stops it all
	@$(BOOTSTRAP) --redis-only $(EXAMPLE_LEG)
	PATH="$(CURDIR)/.venv/$(EXAMPLE_LEG)/bin:$$PATH" EXAMPLE_PORT=$(EXAMPLE_PORT) \
		python -m tools.servers run --redis --redis-port 0 -- tools/run_example.sh

clean: ## Remove build output and caches (keeps the virtualenvs)
	rm -rf docs/_build dist build .venv/logs .venv/pytest-cache \
		.mypy_cache .ruff_cache .pytest_cache
	find . -path ./.venv -prune -o \
		\( -name __pycache__ -o -name '*.egg-info' \) -prune -exec rm -rf {} +

distclean: clean ## Also remove the virtualenvs
	rm -rf .venv
