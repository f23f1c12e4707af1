# Quickstart: `make train` (environment + default experiment), `make test` (whole suite).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: env train test lint clean bench constraints

env: $(STAMP)

# Installs the versions in constraints.txt (the stack the suite was verified with), so every machine gets the same one.
$(STAMP): setup.cfg pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e ".[dev]"
	touch $(STAMP)

# Re-resolves constraints.txt from setup.cfg's ranges in a throw-away environment (then run make test and commit).
constraints:
	rm -rf .venv-constraints && $(PYTHON) -m venv .venv-constraints
	.venv-constraints/bin/python -m pip install --quiet --upgrade pip
	.venv-constraints/bin/python -m pip install --quiet -e ".[dev]"
	{ grep '^#' constraints.txt; .venv-constraints/bin/python -m pip freeze --exclude-editable; } > constraints.txt.new
	mv constraints.txt.new constraints.txt && rm -rf .venv-constraints

train: $(STAMP)
	$(PY) train.py $(ARGS)

test: $(STAMP)
	$(PY) -m pytest -m "not gpu" $(ARGS)

# CPU benchmarks (bench/*.py, < 30 min): results in bench/results/*.json, README table re-rendered from them.
bench: $(STAMP)
	@start=$$(date +%s); set -e; \
	for script in training_overhead data_loading conversion zeroshot_generation ocr vlm_training vlm_flops memory_plan; do \
		echo "== bench/$$script.py"; $(PY) bench/$$script.py $(ARGS); \
	done; \
	$(PY) scripts/bench_table.py; \
	echo "make bench: $$(( $$(date +%s) - start )) s wall, load average now $$(cut -d' ' -f1-3 /proc/loadavg)"

lint: $(STAMP)
	$(PY) -m ruff check . && $(PY) -m ruff format --check .

clean:
	rm -rf checkpoints/*/ data/shards data/assets
