# `make run` and `make test` bootstrap .venv from nothing (see README.md).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test venv clean bench

$(STAMP): pyproject.toml setup.py rmq/_native.c rmq/_crc_vpclmul.h
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)
	$(BIN)/rmq up $(ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/rmq bench store --count 200000 --size 100

clean:
	rm -rf $(VENV) build *.egg-info
