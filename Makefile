# Entry points. `make run` and `make test` do all the set-up on a fresh machine.
SHELL := /bin/bash
.DEFAULT_GOAL := help

# Lambda runs python3.13: use pyenv's 3.13 when it exists, else the newest python3 >= 3.11.
PYENV_313 := $(lastword $(sort $(wildcard $(HOME)/.pyenv/versions/3.13*/bin/python3)))
PYTHON_BOOT ?= $(or $(PYENV_313),$(shell for p in python3.13 python3.12 python3.11 python3; do \
	command -v $$p >/dev/null && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' && { command -v $$p; break; }; done))
# Python keeps compiled bytecode here even where the environment says not to
# (PYTHONDONTWRITEBYTECODE): without it every test process and every local runtime the
# tests start compiles boto3, moto and the layer from source again.
unexport PYTHONDONTWRITEBYTECODE

VENV := .venv
PY := $(VENV)/bin/python
SAM_VENV := .venv-sam
SAM := $(SAM_VENV)/bin/sam
STAMP := $(VENV)/.installed
# Vercel's AI SDK, pinned in tests/node's lockfile, for the e2e test that drives it.
NODE_DIR := tests/node
NODE_STAMP := $(NODE_DIR)/node_modules/.installed

.PHONY: help venv node browser run test test-fast test-unit test-integration test-e2e test-bench lint format typecheck bench build validate admin-token clean

help:
	@echo "make run        start the local runtime (http://127.0.0.1:3000, Lambda API on :3001)"
	@echo "make test       run the whole test suite (installs Chromium's headless shell for the Studio test)"
	@echo "make test-fast  the suite without the browser tests (no Chromium needed)"
	@echo "make lint       ruff check, ruff format --check, mypy, cfn-lint"
	@echo "make bench      what a turn costs and how it holds up: a headline, then 23 figures"
	@echo "                (run make build first for the cold imports of the built artifacts)"
	@echo "make build      sam build: python3.13 arm64 wheels, the layer with compiled bytecode"
	@echo "make validate   sam validate --lint and cfn-lint"

$(STAMP): pyproject.toml layers/common/requirements.txt
	@test -n "$(PYTHON_BOOT)" || { echo "need python >= 3.11" >&2; exit 1; }
	@test -x $(PY) || $(PYTHON_BOOT) -m venv $(VENV)
	@# uv installs in parallel (seconds, where pip took 70-170 s); the layer's pins
	@# constrain the dev environment to what ships.
	$(PY) -m pip install --quiet --disable-pip-version-check uv
	$(VENV)/bin/uv pip install --quiet --python $(PY) \
		--constraint layers/common/requirements.txt -e '.[dev]'
	@# Compiled once, not by each test process and runtime at once: the project's own code,
	@# then what the tests import (a collection also writes pytest's rewritten test
	@# modules), in two collections, one per core: the e2e and bench tiers import the
	@# SDKs, the others moto (11 s in one, 8 s in two). Compiling all 16,000 modules of
	@# the environment took 30 s of CPU more.
	$(PY) -m compileall -q -j 0 layers functions local_runtime client bench tests >/dev/null
	$(PY) -m pytest --collect-only -q tests/e2e tests/bench >/dev/null & sdks=$$!; \
	$(PY) -m pytest --collect-only -q tests/unit tests/integration tests/contract tests/client \
		>/dev/null; moto=$$?; wait $$sdks && exit $$moto
	@touch $(STAMP)

venv: $(STAMP)

# npm ci only when the lockfile changed (node_modules is git-ignored).
$(NODE_STAMP): $(NODE_DIR)/package.json $(NODE_DIR)/package-lock.json
	@command -v npm >/dev/null || { echo "need Node >= 20 and npm (the AI SDK test runs under Node)" >&2; exit 1; }
	cd $(NODE_DIR) && npm ci --no-audit --no-fund --loglevel=error
	@touch $(NODE_STAMP)

node: $(NODE_STAMP)

# The Studio browser test drives Debian's build of Chromium's headless shell (never a
# downloaded browser): the same Blink as chromium, without the browser's own UI, which
# cost twice the CPU of the pages themselves.
CHROMIUM := /usr/bin/chromium-headless-shell
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
browser:
	@test -x $(CHROMIUM) || { $(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium-headless-shell; }

run: $(STAMP)
	$(PY) -m local_runtime

# The suite in parallel processes, one test module per process at a time (a module shares
# one moto backend or one local runtime between its tests). Most of a test's time is
# waiting on sockets and subprocesses, so more workers than cores keep both cores busy: on
# a 2-core machine four finished the suite in 202 s where three took 224 s and five 214 s.
# Modules go out longest first, then tier by tier (tests/support/schedule.py), not in
# xdist's order by number of tests, which left the long one-test modules to the end.
TEST_WORKERS ?= 4
PARALLEL := -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

test: $(STAMP) $(NODE_STAMP) browser
	$(PY) -m pytest $(PARALLEL)

test-fast: $(STAMP) $(NODE_STAMP)
	$(PY) -m pytest $(PARALLEL) -m "not browser"

test-unit: $(STAMP)
	$(PY) -m pytest tests/unit

test-integration: $(STAMP)
	$(PY) -m pytest tests/integration

test-e2e: $(STAMP) $(NODE_STAMP) browser
	$(PY) -m pytest tests/e2e

test-bench: $(STAMP)
	$(PY) -m pytest tests/bench

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/cfn-lint template.yaml

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

typecheck: $(STAMP)
	$(VENV)/bin/mypy

bench: $(STAMP)
	@$(PY) -m bench

$(SAM):
	@test -x $(SAM_VENV)/bin/python || $(PYTHON_BOOT) -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/pip install --quiet aws-sam-cli

# sam build needs the runtime's interpreter (python3.13) on PATH: the functions' builder
# and layers/common/Makefile (build-CommonLayer, which compiles the layer's bytecode) use it.
build: $(SAM)
	PATH="$(dir $(PYTHON_BOOT)):$$PATH" SAM_CLI_TELEMETRY=0 $(SAM) build

validate: $(SAM) $(STAMP)
	SAM_CLI_TELEMETRY=0 $(SAM) validate --lint --region us-east-1
	$(VENV)/bin/cfn-lint template.yaml

# For a deployed stack: creates a workspace and prints its token once.
admin-token: $(STAMP)
	@test -n "$(NAME)" -a -n "$(TABLE)" || { echo "usage: make admin-token NAME=<workspace> TABLE=<ConversationsTable>" >&2; exit 2; }
	$(PY) -m convo_memory.cli create-workspace "$(NAME)" --table "$(TABLE)"

clean:
	rm -rf .aws-sam .pytest_cache .mypy_cache .ruff_cache
