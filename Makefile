# `make run` and `make test` bootstrap .venv from nothing (see README.md).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test venv clean bench shell

$(STAMP): pyproject.toml setup.py rmq/_native.c rmq/_crc_vpclmul.h rmq/_native_produce.h
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)
	@echo "rmq up $(ARGS): NameServer, broker and Kafka listener in this terminal (Ctrl-C stops)."
	@echo "Next, in another terminal of this directory:"
	@echo "  .venv/bin/rmq admin updateTopic -c DefaultCluster -t Demo -r 4 -w 4"
	@echo "  .venv/bin/rmq admin sendMessage -t Demo -p 'hello'"
	@echo "  .venv/bin/rmq admin pushConsume -t Demo -g cg_demo --count 1 --duration 10"
	@echo "(with another --namesrv-port, add -n 127.0.0.1:PORT; or run 'make shell' / 'source .venv/bin/activate' and drop the .venv/bin/ prefix)"
	$(BIN)/rmq up $(ARGS)

shell: $(STAMP)
	@echo "Starting a shell with .venv activated (rmq on PATH); 'exit' leaves it."
	@bash --init-file $(VENV)/bin/activate -i

test: $(STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/rmq bench store --count 200000 --size 100

clean:
	rm -rf $(VENV) build *.egg-info
