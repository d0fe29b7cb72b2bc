# Two commands set everything up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The CPU wheel of torch that a machine without a GPU gets (small, no CUDA download), from PyTorch's CPU
# index (PyPI's torch for Linux is the CUDA build, GBs); where that index is out of reach, pip's own.
# One retry there: where its host does not resolve, pip's default 5 retried every package (77 s, not 3);
# the price is that a longer outage of that index falls back sooner to pip's (CUDA) torch.
CPU_TORCH ?= torch==2.13.0

.PHONY: demo test test-fast bench bench-v1 lint setup clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@echo "setup: creating the virtual environment $(VENV) (once; a few minutes)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	@if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
		echo "GPU found: installing the default (CUDA) torch build"; \
	else \
		echo "no GPU: installing the CPU build $(CPU_TORCH)"; \
		$(BIN)/python -m pip install -q --retries 1 "$(CPU_TORCH)" --index-url https://download.pytorch.org/whl/cpu || \
		$(BIN)/python -m pip install -q "$(CPU_TORCH)"; \
	fi
	@echo "setup: installing Preflight and its extras (postgres, demo, bench, test)"
	$(BIN)/python -m pip install -q -e ".[service,worker,postgres,demo,bench,test]"
	touch $(STAMP)
	@echo "setup: done"

# The Fashion-MNIST search (CNNs) where its IDX files are installed (dataset-fashion-mnist), else digits.
DEMO_DATASET = $(shell $(BIN)/python -c "import nas.fashion_mnist as f; print('fashion-mnist' if f.available() else 'digits')" 2>/dev/null || echo digits)

demo: $(STAMP)
	$(BIN)/preflight demo --dataset $(DEMO_DATASET)

# The whole suite, after the static checks (lint): CI runs this (.ci/run). It ends with the 25
# slowest tests and their seconds, so a test that grows slow shows in every CI log.
test: lint
	$(BIN)/python -m pytest -q --durations=25

# Benchmark v2 (docs/benchmarks.md), the Fashion-MNIST search (docs/fashion-search.md) and the
# NAS-Bench-201 cells (docs/nasbench201.md): resumable from the committed caches (what an older engine
# computed there is kept and named in the reports, and each report keeps its note: --note sets it);
# from empty caches about 9-13 hours on a 2-core CPU for the first two and about 20 CPU-hours for
# NAS-Bench-201's 1,150 cells; need Fashion-MNIST
# (apt-get install dataset-fashion-mnist, or PREFLIGHT_FASHION_MNIST_DIR).
# The quick loop while developing (about 2 minutes on 2 cores): every test not marked slow (no
# subprocess servers or worker loops, no benchmark, report or browser runs, no worker kills), without the
# static checks. `make test` stays the complete suite.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

bench: $(STAMP)
	$(BIN)/python -m bench.v2
	$(BIN)/python -m bench.fashion_search.retime --seeds 10
	$(BIN)/python -m bench.fashion_search --seeds 10 --keep-older-engines
	$(BIN)/python -m bench.nasbench201 --dev 150 --keep-older-engines
	# the same 1,150 cells on a Gaussian batch (docs/nasbench201-gaussian.md), all in its cache
	$(BIN)/python -m bench.nasbench201 --data gaussian --dev 150 --keep-older-engines --docs docs/nasbench201-gaussian.md

# Benchmark v1, digits only (docs/benchmarks-v1.md).
bench-v1: $(STAMP)
	$(BIN)/python -m bench --extra probe_length --extra output_std --extra gaussian_path

# ruff (lint rules and long lines), the formatter's check, mypy (strict on nas, the package
# controllers import; the default checks on service, worker and every benchmark).
lint: $(STAMP)
	$(BIN)/ruff check nas service worker bench tests
	$(BIN)/ruff format --check nas service worker bench tests
	$(BIN)/mypy --strict -p nas
	$(BIN)/mypy -p service -p worker
	$(BIN)/mypy -p bench
	$(BIN)/mypy --explicit-package-bases tests

clean:
	rm -rf $(VENV) build *.egg-info
