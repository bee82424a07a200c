# The two commands a newcomer needs: `make demo` and `make test`. Each installs what it needs and reuses what is
# already there: the virtual environment (keyed on pyproject.toml), then the stack's binaries (the collector built
# from collector_config/builder.yaml, cached by its hash; VictoriaLogs; Prometheus from Debian's package).

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed

.PHONY: venv stack-install stack-up stack-down demo test typecheck bench soak clean

$(INSTALLED): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,bench]'
	touch $@

venv: $(INSTALLED)

stack-install: venv
	$(VENV)/bin/otel-rl stack install

stack-up: stack-install
	$(VENV)/bin/otel-rl stack up

stack-down: venv
	$(VENV)/bin/otel-rl stack down

demo: stack-install
	$(PY) -m demo

typecheck: venv
	$(VENV)/bin/mypy otel_rl demo bench

test: stack-install typecheck
	$(PY) -m pytest -q

bench: venv
	$(PY) -m bench

# The long soak (~3.5 min): 4 ranks x 360 steps (30 minutes of a job stepping every 5 s, 10x accelerated) with
# periodic faults; report in soak-report.json. `make test` runs a ~30 s version (tests/reliability/test_soak.py).
soak: stack-install
	$(PY) -m tests.reliability.soak --report soak-report.json

clean:
	rm -rf $(VENV) demo-output .pytest_cache .mypy_cache
