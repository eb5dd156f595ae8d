# croupier's entry points. Each one runs scripts/bootstrap.sh first, so a fresh machine needs
# nothing but `make demo` or `make test`.
SHELL := /bin/bash
ROOT := $(abspath .)
BUILD ?= build
JOBS ?= $(shell nproc)
PY := $(ROOT)/.venv/bin/python
CMAKE_ARGS ?=

.PHONY: all bootstrap configure build test test-cpp test-python demo demo-mpi bench clean format

all: build

bootstrap:
	@bash scripts/bootstrap.sh

$(BUILD)/build.ninja: | bootstrap
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  -DPython_EXECUTABLE=$(PY) $(CMAKE_ARGS)

configure: bootstrap $(BUILD)/build.ninja

# Builds the library, the command (build/bin/croupier), the tests, the benchmarks and the Python
# module, and puts python/ on the .venv's path (development mode).
build: configure
	cmake --build $(BUILD) -j $(JOBS)
	@$(PY) scripts/dev_install.py

test: build
	$(MAKE) --no-print-directory test-cpp test-python

test-cpp:
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) --timeout 600

test-python:
	$(PY) -m pytest -q

demo: build
	bash scripts/demo.sh

# The same training under OpenMPI's mpirun with an mpi4py all-reduce: the Horovod pattern.
demo-mpi: build
	DEMO_LAUNCHER=mpi bash scripts/demo.sh

bench: build
	$(PY) bench/run.py

format:
	find include src tools python bench -name '*.h' -o -name '*.cc' | xargs clang-format -i

clean:
	rm -rf $(BUILD) python/croupier/_croupier*.so
