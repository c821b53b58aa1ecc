# Two commands matter: `make serve` and `make test`. Both set up .venv themselves.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
HOST   ?= 127.0.0.1
PORT   ?= 8080

.PHONY: serve test lint typecheck pytest lock bench clean

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

pytest: $(VENV)/.dev-installed
	$(BIN)/pytest

test: lint typecheck pytest

# Regenerate the lock files after changing dependencies in pyproject.toml.
lock: $(VENV)/.dev-installed
	$(BIN)/python -m pip install --quiet uv
	$(BIN)/uv pip compile pyproject.toml --python-version 3.11 -o requirements/runtime.lock
	$(BIN)/uv pip compile pyproject.toml --extra dev --python-version 3.11 -o requirements/dev.lock

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
