# `make run` and `make test` bootstrap .venv from nothing (see README.md). `make run` (and `make
# shell`, `make bench`) install what running the broker needs (`pip install -e .`); `make venv` and
# `make test` add the dev extra (tests, Spark, labs, fuzzing, third-party clients), which the docs
# pages assume. Each set has its own stamp, so `make run` on a fresh clone does not fetch pyspark.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP_RUN := $(VENV)/.installed-run
STAMP_DEV := $(VENV)/.installed-dev
DEPS   := pyproject.toml setup.py rmq/_native.c rmq/_crc_vpclmul.h rmq/_native_produce.h rmq/_native_send.h rmq/_native_spark.h rmq/_native_fetch.h rmq/_native_writer.h

.PHONY: run test venv clean bench shell chromium

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP_RUN): $(DEPS) | $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	touch $(STAMP_RUN)

# the dev set includes the runtime set, so it stamps both
$(STAMP_DEV): $(DEPS) | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[dev]'
	@$(MAKE) --no-print-directory chromium
	touch $(STAMP_RUN) $(STAMP_DEV)

# The console's browser tests (tests/test_console.py) drive Debian's headless Chromium. Installed
# here when running as root and missing; never fails the build (the tests then skip, saying why).
chromium:
	@if command -v chromedriver >/dev/null 2>&1 && command -v chromium >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing chromium and chromium-driver (apt-get) for the console's browser tests"; \
	  (timeout 600 apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 || \
	   (timeout 300 apt-get update -q >/dev/null 2>&1 && \
	    timeout 600 apt-get install -y -q chromium chromium-driver >/dev/null 2>&1)) || \
	  echo "note: chromium/chromium-driver could not be installed; the console's browser tests will skip"; \
	else echo "note: no chromium/chromium-driver (install them as root); the console's browser tests will skip"; fi

venv: $(STAMP_DEV)

run: $(STAMP_RUN)
	@echo "rmq up $(ARGS): NameServer, broker and Kafka listener in this terminal (Ctrl-C stops)."
	@echo "Next, in another terminal of this directory:"
	@echo "  .venv/bin/rmq admin updateTopic -c DefaultCluster -t Demo -r 4 -w 4"
	@echo "  .venv/bin/rmq admin sendMessage -t Demo -p 'hello'"
	@echo "  .venv/bin/rmq admin pushConsume -t Demo -g cg_demo --count 1 --duration 10"
	@echo "(with another --namesrv-port, add -n 127.0.0.1:PORT; or run 'make shell' / 'source .venv/bin/activate' and drop the .venv/bin/ prefix)"
	$(BIN)/rmq up $(ARGS)

shell: $(STAMP_RUN)
	@echo "Starting a shell with .venv activated (rmq on PATH); 'exit' leaves it."
	@bash --init-file $(VENV)/bin/activate -i

# The suite mostly waits on brokers, clients and timers, so it runs in TEST_WORKERS processes
# (tests/conftest.py groups the Spark files in one and keeps the docs pages on the first);
# TEST_WORKERS=0 runs it in this process alone. The 25 slowest tests are listed at the end, the
# place to start when the suite's time grows.
TEST_WORKERS ?= 3
test: $(STAMP_DEV)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=25 $(PYTEST_ARGS)

bench: $(STAMP_RUN)
	$(BIN)/rmq bench store --count 200000 --size 100

clean:
	rm -rf $(VENV) build *.egg-info
