# The two commands a newcomer needs: `make demo` and `make test`. Each installs what it needs and reuses what is
# already there: the virtual environment (keyed on pyproject.toml), then the stack's binaries (the collector built
# from collector_config/builder.yaml, cached by its hash; VictoriaLogs, Prometheus and promtool by `go install`).

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed
# The trainer's core install (no extras) against the lowest supported OpenTelemetry release.
LOWEST := .venv-otel-lowest
LOWEST_INSTALLED := $(LOWEST)/.installed

.PHONY: venv stack-install stack-up stack-down demo test test-otel-lowest typecheck bench soak clean

$(INSTALLED): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

# Core install first, then a smoke run proving a trainer needs no extra; the test tools come after.
$(LOWEST_INSTALLED): pyproject.toml .ci/otel-lowest.txt
	test -x $(LOWEST)/bin/python || $(PYTHON) -m venv $(LOWEST)
	$(LOWEST)/bin/python -m pip install -q --upgrade pip
	$(LOWEST)/bin/python -m pip install -q -e . -c .ci/otel-lowest.txt
	$(LOWEST)/bin/python -c 'import otel_rl, otel_rl.torchforge; t = otel_rl.Telemetry(otel_rl.TelemetryConfig(exporter="none")); t.record_rewards([1.0]); t.shutdown()'
	$(LOWEST)/bin/python -m pip install -q -c .ci/otel-lowest.txt 'pytest>=8' 'hypothesis>=6.100' 'pyyaml>=6'
	touch $@

# The unit suite on the lowest supported OpenTelemetry (the main venv has the newest).
test-otel-lowest: $(LOWEST_INSTALLED)
	$(LOWEST)/bin/python -m pip list 2>/dev/null | grep -E '^opentelemetry-sdk +1\.39\.0$$'
	$(LOWEST)/bin/python -m pytest -q -p no:cacheprovider tests/unit otel_rl --ignore=otel_rl/stack --ignore=otel_rl/report --ignore=otel_rl/trl.py

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

test: stack-install typecheck test-otel-lowest
	$(VENV)/bin/otel-rl stack install --cluster
	$(PY) -m pytest -q

bench: venv
	$(PY) -m bench

# The long soak (~3.5 min): 4 ranks x 360 steps (30 minutes of a job stepping every 5 s, 10x accelerated) with
# periodic faults; report in soak-report.json. `make test` runs a ~30 s version (tests/reliability/test_soak.py).
soak: stack-install
	$(PY) -m tests.reliability.soak --report soak-report.json

clean:
	rm -rf $(VENV) $(LOWEST) demo-output .pytest_cache .mypy_cache
