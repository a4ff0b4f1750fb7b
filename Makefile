# The two commands a newcomer needs: `make run` and `make test`. Both build .venv themselves.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test test-compose lint unit integration sim install proto clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	@$(PYTHON) -c 'import sys; sys.exit("Python 3.11+ is required" if sys.version_info < (3, 11) else 0)'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[server,spark,verify,dev]'
	touch $(STAMP)

# Starts a local cluster (real ZooKeeper + 3 bookies) in the foreground until Ctrl-C.
run: $(STAMP)
	$(VENV)/bin/pybk localcluster --bookies 3 --data-dir ./data

# Static checks: generated code is fresh, ruff and strict mypy are clean.
lint: $(STAMP)
	$(PY) scripts/gen_proto.py --check
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# pytest exits 5 when it collected nothing: that is a broken suite, never a pass.
define run_pytest
	$(PY) -m pytest $(1); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests in $(1): failing"; exit 1; fi; exit $$rc
endef

unit: $(STAMP)
	@$(call run_pytest,tests/unit -q)

integration: $(STAMP)
	@$(call run_pytest,tests/integration -q)

# The deterministic simulation's CI campaign (issue 26): 300 seeds, a few minutes. A long one:
# `python -m tests.sim campaign --seeds 1..100000`; replay a seed with `python -m tests.sim run`.
sim: $(STAMP)
	$(PY) -m tests.sim campaign --seeds 1..300

test: lint unit integration sim

# deploy/docker-compose.yml for real, against a Docker engine the script starts or installs.
test-compose: $(STAMP)
	PY=$(PY) scripts/test_compose.sh

proto: $(STAMP)
	$(PY) scripts/gen_proto.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
