# Two commands matter: `make run` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet --upgrade pip
	@$(BIN)/python -m pip install --quiet -e '.[all,dev]'
	@touch $(STAMP)

run: $(STAMP)
	$(BIN)/cronfleet run --config examples/cronfleet.toml

lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python bench/cron_next.py
	$(BIN)/python bench/runtime.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
