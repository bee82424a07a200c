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

clean:
	rm -rf $(VENV) demo-output .pytest_cache .mypy_cache
