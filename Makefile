# tierd — the two commands a newcomer needs are `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
CONFIG ?= config.example.yaml
STAMP  := $(VENV)/.installed
DEVSTAMP := $(VENV)/.installed-dev

.PHONY: run test lint typecheck unit bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# aioboto3 pins botocore: install it first so pip does not backtrack for minutes.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q "aioboto3==15.5.0"
	$(BIN)/pip install -q -e .
	touch $(STAMP)

$(DEVSTAMP): $(STAMP)
	$(BIN)/pip install -q -e '.[dev]'
	touch $(DEVSTAMP)

run: $(STAMP)
	# The example's tiers are plain directories; real tiers are mounts tierd never creates.
	mkdir -p var/nvme/checkpoints var/pfs var/object var/replica
	$(BIN)/tierd db upgrade --config $(CONFIG)
	exec $(BIN)/tierd run --config $(CONFIG)

# Two workers for everything but the timing-sensitive tests, which then run alone.
test: $(DEVSTAMP) lint typecheck
	$(BIN)/python -m pytest -n 2 --dist loadfile -m "not serial"
	$(BIN)/python -m pytest -m serial

lint: $(DEVSTAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(DEVSTAMP)
	$(BIN)/mypy

bench: $(DEVSTAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
