# Quickstart: `make train` (environment + default experiment), `make test` (whole suite).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: env train test test-floor lint clean bench constraints wheelhouse

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

# The wheels a GPU node with no package index needs beyond its base image (docs/cluster.md): BASE=<the node's
# `pip list --format=freeze`>; EXTRAS=deepspeed,wandb … for optional parts; refused over BUDGET_MIB.
PYTHON_VERSION ?= 3.12
PLATFORM ?= manylinux_2_28_x86_64
BUDGET_MIB ?= 60
wheelhouse: $(STAMP)
	$(PY) scripts/wheelhouse.py --base $(BASE) --python-version $(PYTHON_VERSION) --platform $(PLATFORM) \
		--budget-mib $(BUDGET_MIB) $(if $(EXTRAS),--extras $(EXTRAS))

# One pytest worker per core, at most 4 (TEST_WORKERS=1: one process); a module's tests stay on one worker (its fixtures run once).
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); echo $$(( n < 4 ? n : 4 )))
test: $(STAMP)
	$(PY) -m pytest -m "not gpu" -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(ARGS)

# The other end of setup.cfg's ranges: .venv-floor gets the oldest verified release of each key dependency
# (constraints-floor.txt, each pin equal to its floor in setup.cfg; everything else resolves to the newest release that
# fits) and runs the part of the suite that exercises them, one pytest after the other (2 cores).
FLOOR_VENV := .venv-floor
FLOOR_PY := $(FLOOR_VENV)/bin/python
FLOOR_STAMP := $(FLOOR_VENV)/.installed
FLOOR_TESTS := tests/test_constraints.py tests/training/test_zero3_inference.py tests/artifacts/test_export_predict.py \
	tests/data tests/bad_input tests/models

$(FLOOR_STAMP): setup.cfg pyproject.toml constraints-floor.txt
	test -x $(FLOOR_PY) || $(PYTHON) -m venv $(FLOOR_VENV)
	$(FLOOR_PY) -m pip install --quiet --upgrade pip
	$(FLOOR_PY) -m pip install --quiet -c constraints-floor.txt -e ".[dev]"
	touch $(FLOOR_STAMP)

# DeepSpeed's CPU ops are JIT-built per torch: the floor stack keeps its own build folder (torch's default one is shared
# by every environment and, on the floor's torch, waits forever on a lock that a killed build left there).
test-floor: $(FLOOR_STAMP)
	export TORCH_EXTENSIONS_DIR=$(CURDIR)/$(FLOOR_VENV)/torch_extensions CROSSMOD_CONSTRAINTS=constraints-floor.txt; \
	$(FLOOR_PY) -m pytest -m "not gpu" -p no:cacheprovider $(FLOOR_TESTS) $(ARGS) && \
	$(FLOOR_PY) -m pytest -m "not gpu" -p no:cacheprovider tests/results/test_evaluate.py -k two_processes $(ARGS)

# CPU benchmarks (bench/*.py, < 30 min): results in bench/results/*.json, README table re-rendered from them.
bench: $(STAMP)
	@start=$$(date +%s); set -e; \
	for script in training_overhead shared_cores data_loading conversion zeroshot_generation ocr vlm_training vision_cache vlm_flops memory_plan cli_startup serve; do \
		echo "== bench/$$script.py"; $(PY) bench/$$script.py $(ARGS); \
	done; \
	$(PY) scripts/bench_table.py; \
	echo "make bench: $$(( $$(date +%s) - start )) s wall, load average now $$(cut -d' ' -f1-3 /proc/loadavg)"

lint: $(STAMP)
	$(PY) -m ruff check . && $(PY) -m ruff format --check .

clean:
	rm -rf checkpoints/*/ data/shards data/assets
