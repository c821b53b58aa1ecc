# Two commands matter: `make serve` and `make test`. Both set up .venv themselves.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
HOST   ?= 127.0.0.1
PORT   ?= 8080

.PHONY: serve test lint typecheck pytest lock clean bench

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# A stamp per lock file: reinstall only when the lock or the project metadata changed.
$(VENV)/.runtime-installed: requirements/runtime.lock pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -r requirements/runtime.lock
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@

$(VENV)/.dev-installed: requirements/dev.lock pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -r requirements/dev.lock
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@ $(VENV)/.runtime-installed

serve: $(VENV)/.runtime-installed
	$(BIN)/execauth db upgrade
	$(BIN)/execauth serve --host $(HOST) --port $(PORT)

lint: $(VENV)/.dev-installed
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests

typecheck: $(VENV)/.dev-installed
	$(BIN)/mypy

# Browser tests (tests/web/test_browser.py) drive Debian's chromium; they skip, visibly,
# when it cannot be installed. The stamp is only written once chromium is there.
$(VENV)/.chromium: | $(BIN)/python
	@command -v chromium >/dev/null 2>&1 || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } || \
		echo "chromium could not be installed: the browser tests will be skipped"
	@if command -v chromium >/dev/null 2>&1; then touch $@; fi

pytest: $(VENV)/.dev-installed $(VENV)/.chromium
	$(BIN)/pytest

test: lint typecheck pytest

# Load and micro benchmarks (bench/run.py; docs/performance.md). Not part of `make test`.
# `make bench` runs execauth, the plain-Starlette baseline and Cerbos under wrk for 20 s
# each; ARGS passes options: --postgres, --profile, --duration N, --micro (micro only).
$(VENV)/.bench-installed: | $(VENV)/.runtime-installed
	$(BIN)/python -m pip install --quiet pytest pytest-benchmark py-spy
	touch $@

bench: $(VENV)/.runtime-installed $(VENV)/.bench-installed
	@command -v wrk >/dev/null 2>&1 || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk; }
	@test -x bench/.cerbos/node_modules/@cerbos/cerbos-linux-x64/cerbos-linux-x64 || \
		npm install --silent --no-save --no-audit --no-fund --prefix bench/.cerbos @cerbos/cerbos-linux-x64
	$(BIN)/python bench/run.py $(ARGS)

# Regenerate the lock files after changing dependencies in pyproject.toml.
lock: $(VENV)/.dev-installed
	$(BIN)/python -m pip install --quiet uv
	$(BIN)/uv pip compile pyproject.toml --python-version 3.11 -o requirements/runtime.lock
	$(BIN)/uv pip compile pyproject.toml --extra dev --python-version 3.11 -o requirements/dev.lock

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
