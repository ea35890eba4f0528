# tierd — the two commands a newcomer needs are `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
CONFIG ?= config.example.yaml
STAMP  := $(VENV)/.installed
DEVSTAMP := $(VENV)/.installed-dev
# Every library's version, so one commit installs the same libraries on every day (`make lock`).
CONSTRAINTS := constraints.txt
LOCKVENV ?= /tmp/tierd-lock-venv
# pytest-xdist workers for the tests that need not run alone. Three on the 2-core CI machine: many
# tests wait on daemons, servers and disks, and a third worker fills that idle time (the whole run
# 941 s with two, 843 s with three, on the same tree and the quiet machine).
TEST_WORKERS ?= 3

.PHONY: run test suite check quick lint typecheck bench clean lock

# The venv's libraries are installed by uv, which fetches and unpacks them in parallel: the dev
# extra (1.8 GB, torch among it) took pip 686 s on the 2-core machine and uv 50 s. pip stays in
# the venv, at the version below, for the tests that build wheels and venvs with it.
UV_VERSION := 0.13.9
PIP_VERSION := 26.3
FIND_LINKS ?= $(or $(PIP_FIND_LINKS),$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null))
UV = $(BIN)/uv pip install -q --python $(BIN)/python $(foreach d,$(FIND_LINKS),--find-links $(d))

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(BIN)/uv: | $(BIN)/python
	$(BIN)/pip install -q uv==$(UV_VERSION)

# The constraints pin botocore (which aioboto3 pins) too, so one pass resolves. The daemon (.)
# depends on the client's distribution (client/), which comes from this tree, not an index.
# A machine's own wheels (pip's find-links: torch's CPU build, say) are looked at too.
$(STAMP): pyproject.toml client/pyproject.toml $(CONSTRAINTS) | $(BIN)/uv
	$(UV) -c $(CONSTRAINTS) pip==$(PIP_VERSION) -e ./client -e .
	touch $(STAMP)

$(DEVSTAMP): $(STAMP)
	$(UV) -c $(CONSTRAINTS) -e ./client -e '.[dev]'
	touch $(DEVSTAMP)

# Regenerate constraints.txt from the newest releases pyproject.toml allows, in a scratch venv.
# Unconstrained, aioboto3 (which pins botocore) goes first so pip does not backtrack for minutes.
lock:
	rm -rf $(LOCKVENV)
	$(PYTHON) -m venv $(LOCKVENV)
	$(LOCKVENV)/bin/pip install -q --upgrade pip
	$(LOCKVENV)/bin/pip install -q "aioboto3==15.5.0"
	$(LOCKVENV)/bin/pip install -q -e ./client -e '.[dev]'
	{ sed -n '/^#/p' $(CONSTRAINTS); \
	  $(LOCKVENV)/bin/pip freeze --all --exclude-editable | grep -v '^pip=='; } > $(CONSTRAINTS).new
	mv $(CONSTRAINTS).new $(CONSTRAINTS)
	rm -rf $(LOCKVENV)

run: $(STAMP)
	# The example's tiers are plain directories; real tiers are mounts tierd never creates.
	mkdir -p var/nvme/checkpoints var/pfs var/object var/replica
	$(BIN)/tierd db upgrade --config $(CONFIG)
	exec $(BIN)/tierd run --config $(CONFIG)

# Three workers for everything but a test marked serial (none today), which would then run alone.
# The files that hold slow tests are collected first (tests/fixtures/order.py). Tests are
# handed out one by one (a file's tests stay together only where they share a module fixture:
# its xdist_group), so no long file keeps one worker busy while the other idles. The serial run
# collects only the files that say `mark.serial` (collecting all 2,400 tests costs ~25 s of CPU),
# and is skipped when none does (the fleet's takeovers are timed on the database's clock).
# Bytecode is written even where PYTHONDONTWRITEBYTECODE is set: pytest keeps the test modules'
# rewritten asserts beside them only then, and each worker and run would rewrite them again.
SERIAL_FILES = $(shell grep -rl --include='test_*.py' 'mark\.serial' tests)
# Lint and types run beside the tests, not before them: the suite keeps the two cores ~80 % busy
# (its tests wait on daemons, servers and disks), and a cold mypy (CI has no cache: ~67 CPU-s)
# fits in what it leaves. Any of them failing fails `make test`, once the others are done.
test: $(DEVSTAMP)
	@$(MAKE) --no-print-directory -j 3 lint typecheck suite

suite: $(DEVSTAMP)
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup -m "not serial"
	$(if $(SERIAL_FILES),env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -m serial $(SERIAL_FILES))

# The inner loop: lint, types and the unit tests that are not slow. CI runs the whole of `make test`.
check: $(DEVSTAMP)
	@$(MAKE) --no-print-directory -j 3 lint typecheck quick

quick: $(DEVSTAMP)
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup -m "not serial and not slow" tests/unit

# lint-imports checks the import contracts in pyproject.toml ([tool.importlinter]).
lint: $(DEVSTAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: $(DEVSTAMP)
	$(BIN)/mypy

bench: $(DEVSTAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache .import_linter_cache
