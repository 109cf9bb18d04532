# Two commands matter: `make run` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

AXE := tests/browser/node_modules/axe-core/axe.min.js

.PHONY: run test test-lowest lint bench chaos clean screenshots

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet --upgrade pip
	@$(BIN)/python -m pip install --quiet -e '.[all,dev]'
	@touch $(STAMP)

# make run PORT=9000 ARGS="--role worker --metrics-port 9100"
PORT ?= 8080
ARGS ?=
run: $(STAMP)
	$(BIN)/cronfleet run --config examples/cronfleet.toml --port $(PORT) $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/mypy

# axe-core (npm registry) for the dashboard's browser tests; Chromium comes from apt
$(AXE): tests/browser/package.json
	@if command -v npm >/dev/null 2>&1; then \
	  npm install --prefix tests/browser --no-audit --no-fund --silent && touch $(AXE); \
	else echo "npm not found: the browser tests skip (and fail with CI=true)"; fi

test: lint $(AXE)
	$(BIN)/python -m pytest -q --durations=10
	$(MAKE) test-lowest

# the unit tests against the lowest version every floor in pyproject.toml allows
test-lowest: $(STAMP)
	BIN=$(BIN) .ci/test-lowest

# the dashboard's screenshots in docs/images: every page at 1440x900 and 390x844 (light;
# the overview and a job page dark too), taken by its browser test (Debian's Chromium)
screenshots: $(STAMP) $(AXE)
	CRONFLEET_SCREENSHOTS=docs $(BIN)/python -m pytest -q tests/browser/test_dashboard_d.py \
	  -k every_page_both_sizes

bench: $(STAMP)
	$(BIN)/python bench/cron_next.py
	$(BIN)/python bench/runtime.py
	$(BIN)/python bench/dashboard.py

# the published fault suite (docs/reliability.md), every store, ~55 min; e.g.
# make chaos CHAOS="--store sqlite --only kill9,lock --json"
chaos: $(STAMP)
	$(BIN)/python -m bench.chaos $(CHAOS)

clean:
	rm -rf $(VENV) .venv-lowest .pytest_cache .mypy_cache .ruff_cache tests/browser/node_modules
