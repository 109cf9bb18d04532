# Two commands matter: `make run` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

AXE := tests/browser/node_modules/axe-core/axe.min.js

.PHONY: run test lint bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet --upgrade pip
	@$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

run: $(STAMP)
	$(BIN)/cronfleet run --config examples/cronfleet.toml

lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/mypy

# axe-core (npm registry) for the dashboard's browser tests; Chromium comes from apt
$(AXE): tests/browser/package.json
	@if command -v npm >/dev/null 2>&1; then \
	  npm install --prefix tests/browser --no-audit --no-fund --silent && touch $(AXE); \
	else echo "npm not found: the browser tests skip (and fail with CI=true)"; fi

test: lint $(AXE)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python bench/cron_next.py
	$(BIN)/python bench/runtime.py
	$(BIN)/python bench/dashboard.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache tests/browser/node_modules
