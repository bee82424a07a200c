# The two commands a newcomer needs: `make demo` and `make test`. Each installs what it needs and reuses what is
# already there: the virtual environment (keyed on the three pyproject.toml files), then the stack's binaries (the
# collector built from collector_config/builder.yaml, cached by its hash; VictoriaLogs, Prometheus and promtool by
# `go install`).
#
# Three distributions, one version (docs/architecture.md): otel-rl (the trainer library, pyproject.toml),
# otel-rl-contract (contract/) and otel-rl-ops (ops/, the `otel-rl` command). The environments below install them
# editable from the checkout; `make dist` builds their wheels and sdists as users install them.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed
PROJECTS := pyproject.toml contract/pyproject.toml ops/pyproject.toml
# The trainer's core install (no extras) against the lowest supported OpenTelemetry release.
LOWEST := .venv-otel-lowest
LOWEST_INSTALLED := $(LOWEST)/.installed
# verl 0.9.1 (its own requirements) and otel-rl's core install, for tests/integrations/test_verl.py.
VERL := .venv-verl
VERL_INSTALLED := $(VERL)/.installed

# uv (pinned, from PyPI into .uv/venv) installs both environments from one cache of unpacked wheels, hard-linked
# into each (its default on Linux), so PyTorch's 5 GB with its CUDA wheels lie once on disk, not once per
# environment. The cache is .uv/cache, inside the checkout so that the links never cross a filesystem.
UV_VERSION := 0.13.9
UV := .uv/venv/bin/uv
UV_INSTALLED := .uv/venv/uv-$(UV_VERSION).installed
export UV_CACHE_DIR ?= $(CURDIR)/.uv/cache

.PHONY: venv verl-env dist stack-install stack-up stack-down demo check lint test test-otel-lowest typecheck chart-check bench soak clean

$(UV_INSTALLED):
	test -x .uv/venv/bin/python || $(PYTHON) -m venv .uv/venv
	.uv/venv/bin/python -m pip install -q 'uv==$(UV_VERSION)'
	touch $@

$(INSTALLED): $(PROJECTS) | $(UV_INSTALLED)
	test -x $(PY) || $(UV) venv -q --seed --python $(PYTHON) $(VENV)
	$(UV) pip install -q --python $(PY) -e ./contract -e ./ops -e '.[dev]'
	touch $@

# Core install first, then a smoke run proving a trainer needs no extra; the test tools come after.
$(LOWEST_INSTALLED): pyproject.toml contract/pyproject.toml .ci/otel-lowest.txt | $(UV_INSTALLED)
	test -x $(LOWEST)/bin/python || $(UV) venv -q --seed --python $(PYTHON) $(LOWEST)
	$(UV) pip install -q --python $(LOWEST)/bin/python -e ./contract -e . -c .ci/otel-lowest.txt
	$(LOWEST)/bin/python -c 'import otel_rl, otel_rl.torchforge; t = otel_rl.Telemetry(otel_rl.TelemetryConfig(exporter="none")); t.record_rewards([1.0]); t.shutdown()'
	$(UV) pip install -q --python $(LOWEST)/bin/python -c .ci/otel-lowest.txt 'pytest>=8' 'pytest-timeout>=2.3' 'pytest-rerunfailures>=15' 'pytest-xdist>=3.8' 'hypothesis>=6.100' 'pyyaml>=6'
	touch $@

# torch as in the main environment, so its wheels come from the cache; then a check that verl's plugin loader
# registers the `otel_rl` backend (the `verl.plugins` entry point in pyproject.toml).
$(VERL_INSTALLED): pyproject.toml contract/pyproject.toml | $(INSTALLED)
	test -x $(VERL)/bin/python || $(UV) venv -q --python $(PYTHON) $(VERL)
	$(UV) pip freeze --python $(PY) | grep -E '^torch==' > $(VERL)/constraints.txt
	$(UV) pip install -q --python $(VERL)/bin/python -e ./contract -e . 'verl==0.9.1' -c $(VERL)/constraints.txt
	$(VERL)/bin/python -c 'from verl.utils.tracking import Tracking; assert "otel_rl" in Tracking.supported_backend'
	touch $@

verl-env: $(VERL_INSTALLED)

# The unit suite on the lowest supported OpenTelemetry (the main venv has the newest).
test-otel-lowest: $(LOWEST_INSTALLED)
	$(UV) pip list --python $(LOWEST)/bin/python 2>/dev/null | grep -E '^opentelemetry-sdk +1\.39\.0$$'
	$(LOWEST)/bin/python -m pytest -q -p no:cacheprovider tests/unit otel_rl contract/otel_rl_contract --ignore=otel_rl/trl.py $(XDIST) $(CHECK_WORKERS)

venv: $(INSTALLED)

# The three distributions' wheels and sdists, as users install them (tests/packaging builds its own copy).
dist: $(UV_INSTALLED)
	rm -rf dist
	$(UV) build -q --out-dir dist contract
	$(UV) build -q --out-dir dist ops
	$(UV) build -q --out-dir dist .

stack-install: venv
	$(VENV)/bin/otel-rl stack install

stack-up: stack-install
	$(VENV)/bin/otel-rl stack up

stack-down: venv
	$(VENV)/bin/otel-rl stack down

demo: stack-install
	$(PY) -m demo

# pytest-xdist workers: the stack tests mostly wait on export and scrape intervals, so more workers than the two
# cores finish sooner. `--dist loadscope` keeps each module on one worker, so a module's fixture (a live run, a
# private stack) is set up once; `loadgroup` cannot group under pytest 9.2 (xdist 3.8 renames `item._nodeid`, which
# pytest no longer reads: measured, every test of a group went to any worker).
TEST_WORKERS ?= 4
CHECK_WORKERS ?= 2
XDIST = --dist loadscope -n

lint: venv
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .

typecheck: venv
	$(VENV)/bin/mypy otel_rl contract/otel_rl_contract ops/otel_rl_ops ops/hatch_build.py demo bench tests

# The fast loop: lint, types, and every test that starts and builds nothing (unit, property, fuzz, doctests).
check: lint typecheck
	$(PY) -m pytest -q -m "not stack" $(XDIST) $(CHECK_WORKERS)

# The Helm chart (deploy/helm/): `helm lint --strict` and `helm template` (Helm's own library, helm.sh/helm/v3) over
# the defaults and every values file, every object decoded strictly into its Kubernetes or prometheus-operator Go
# type. The go command fetches the modules of deploy/helm/check/go.mod itself. tests/deploy/ checks the rendered
# collector configs and rules with the collector's `validate` and promtool.
chart-check:
	cd deploy/helm/check && go test -count=1 ./...

# The whole suite in one pytest run (one summary line: passed, failed, reruns), after the checks that fail fast.
test: lint typecheck test-otel-lowest chart-check stack-install $(VERL_INSTALLED)
	$(VENV)/bin/otel-rl stack install --tools --cluster --replay
	$(PY) -m pytest -q $(XDIST) $(TEST_WORKERS)

bench: venv
	$(PY) -m bench $(if $(BENCH_BASELINE),--baseline $(BENCH_BASELINE))

# The long soak (~3.5 min): 4 ranks x 360 steps (30 minutes of a job stepping every 5 s, 10x accelerated) with
# periodic faults; report in soak-report.json. `make test` runs a ~30 s version (tests/reliability/test_soak.py).
soak: stack-install
	$(PY) -m tests.reliability.soak --report soak-report.json

clean:
	rm -rf $(VENV) $(LOWEST) $(VERL) dist demo-output .pytest_cache .mypy_cache .ruff_cache
