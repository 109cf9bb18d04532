# Two commands matter: `make run` and `make test` (`make check` for the inner loop). All
# create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

AXE := tests/browser/node_modules/axe-core/axe.min.js

# Python writes the bytecode of what it compiles (__pycache__/, ignored by git), whatever the
# environment says: the tests start hundreds of Python processes (workers, `cronfleet run`,
# CLI calls), and with PYTHONDONTWRITEBYTECODE set each one compiled cronfleet and
# pytest rewrote every test module again in each worker (docs/development.md, "Bytecode").
unexport PYTHONDONTWRITEBYTECODE

.PHONY: run test check test-lowest lint bench chaos clean screenshots

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

# The whole suite on several workers (pytest-xdist), in two phases (tests/conftest.py has
# the groups; docs/development.md, "Running the tests"): everything but the `timing` tests,
# then the `timing` tests beside each other only (run even when the first phase failed).
# Each phase prints its ten slowest tests.
# `make test WORKERS=8` / `TIMING_WORKERS=4` to change the number of workers; PYTEST_ARGS
# is passed to both phases (e.g. PYTEST_ARGS="-x"). Failures print short tracebacks (the
# failing lines and the assertion's message: every failure of a run fits in a CI log's
# excerpt); PYTEST_ARGS="--tb=long" for whole test functions.
WORKERS ?= 6
TIMING_WORKERS ?= 8
PYTEST_ARGS ?=
PYTEST := $(BIN)/python -m pytest -q --durations=10 --tb=short --dist loadgroup $(PYTEST_ARGS)
# where the timing tests live: the second phase collects only these (tests/phases.py, the
# same list, checked by tests/unit/ecosystem/test_make_phases.py)
TIMING_DIRS := tests/integration tests/chaos tests/security
# lint runs beside the first phase (its output printed when both are done).
test: $(STAMP) $(AXE)
	status=0; \
	$(MAKE) --no-print-directory lint > .lint.out 2>&1 & lint=$$!; \
	$(PYTEST) -n $(WORKERS) -m "not timing" || status=$$?; \
	wait $$lint || status=$$?; cat .lint.out; rm -f .lint.out; \
	$(PYTEST) -n $(TIMING_WORKERS) -m timing $(TIMING_DIRS) || status=$$?; \
	exit $$status

# The inner loop (under a minute): lint beside the unit tests and the store conformance
# suite on the memory store; no real-process (`slow`) test; a tenth of each property's
# examples (tests/properties.py). 4 workers on 2 cores: many of these tests wait on the
# clock (CHECK_WORKERS to change it).
CHECK_WORKERS ?= 4
check: $(STAMP)
	status=0; \
	$(MAKE) --no-print-directory lint > .lint-check.out 2>&1 & lint=$$!; \
	CRONFLEET_PROPERTY_SCALE=0.1 $(BIN)/python -m pytest -q --durations=10 -n $(CHECK_WORKERS) \
	  -m "not slow" --stores memory tests/unit tests/test_layers.py tests/store || status=$$?; \
	wait $$lint || status=$$?; cat .lint-check.out; rm -f .lint-check.out; \
	exit $$status

# the unit and store tests against the lowest version every floor in pyproject.toml allows
# (not part of `make test`; CI runs it after `make test`: .ci/run)
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
