# Two doors: `make run` (the paper's main experiment) and `make test`.
# Both create .venv and install everything on first use (Python 3.11, PyPI).

VENV   ?= .venv
PY     := $(VENV)/bin/python
OCRR   := $(VENV)/bin/ocrr
STAMP  := $(VENV)/.installed
# PyTorch first, as the CPU build this machine keeps on disk; then the project.
TORCH  ?= torch==2.13.0

.PHONY: setup run test bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet $(TORCH)
	$(PY) -m pip install --quiet -e ".[test,ray,lora,service]"
	touch $(STAMP)

# Banking77 when it can be found (--data-dir / $$OCRR_DATA_DIR / cache) or downloaded;
# otherwise the bundled demo set, announced loudly.
run: setup
	$(OCRR) run --dataset banking77 --policy oracle --seeds 0 1 2 \
	    --systems substrate static_knn static_linear online_linear \
	    --fallback-demo --out results/main

test: setup
	$(PY) -m pytest -q

bench: setup
	$(PY) benchmarks/bench_main_job.py
	$(PY) benchmarks/bench_substrate.py
	$(PY) benchmarks/bench_ledger.py

clean:
	rm -rf $(VENV) results
