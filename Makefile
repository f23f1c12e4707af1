# Quickstart: `make train` (environment + default experiment), `make test` (whole suite).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: env train test lint clean

env: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

train: $(STAMP)
	$(PY) train.py $(ARGS)

test: $(STAMP)
	$(PY) -m pytest -m "not gpu" $(ARGS)

lint: $(STAMP)
	$(PY) -m ruff check . && $(PY) -m ruff format --check .

clean:
	rm -rf checkpoints/*/ data/shards data/assets
