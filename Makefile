# Two commands for a newcomer: `make run` and `make test`; `make web` serves the web planner, `make lint`
# checks the code with ruff (rules in pyproject.toml).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
DEFAULT_JOB ?= examples/llama3.1-70b-64xh100.yaml

HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test lint venv web clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev,web,webtest]'
	touch $(VENV)/.installed $(VENV)/.installed-web $@

$(VENV)/.installed-web: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[web]'
	touch $(VENV)/.installed $@

venv: $(VENV)/.installed

run: $(VENV)/.installed
	$(BIN)/shardwise train estimate $(DEFAULT_JOB)

web: $(VENV)/.installed-web
	$(BIN)/shardwise web --host $(HOST) --port $(PORT)

test: $(VENV)/.installed-dev
	$(BIN)/python -m pytest -n 2

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache
