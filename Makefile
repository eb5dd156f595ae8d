# croupier's entry points. Each one runs scripts/bootstrap.sh first with the tier it needs, so a
# fresh machine needs nothing but `make demo` or `make test`: `make demo` installs and builds only
# what the demo needs (its Python packages install while croupier compiles); `make test` adds
# TensorFlow, JAX, Ray, Horovod and the test tools.
SHELL := /bin/bash
ROOT := $(abspath .)
BUILD ?= build
JOBS ?= $(shell nproc)
PY := $(ROOT)/.venv/bin/python
CMAKE_ARGS ?=

.PHONY: all bootstrap bootstrap-build bootstrap-engines configure build build-demo test test-build test-engines test-cpp \
  test-python demo demo-mpi bench bench-peers bench-quick clean format typecheck

all: build

# The test tier (scripts/bootstrap.sh says what each tier holds).
bootstrap:
	@bash scripts/bootstrap.sh test

# The test tier and Horovod.
bootstrap-engines:
	@bash scripts/bootstrap.sh engines

bootstrap-build:
	@bash scripts/bootstrap.sh build

# Configures $(BUILD) when it has no build files yet, or when the environment changed since (the
# tier stamps in .venv): the TensorFlow op builds only when .venv has TensorFlow, so a build
# configured for the demo is configured again once the test tier installed TensorFlow. The demo
# tier adds nothing that configuring looks at.
configure: bootstrap-build
	@env="$$(cd .venv && ls -a | grep '^\.croupier-' | grep -v 'horovod\|demo' | sort | \
	  tr '\n' ' ')"; \
	if [[ ! -f $(BUILD)/build.ninja || "$$(cat $(BUILD)/.croupier-env 2>/dev/null)" != "$$env" ]]; then \
	  cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE=$(PY) \
	    $(CMAKE_ARGS) && echo "$$env" > $(BUILD)/.croupier-env; fi

# Builds the library, the command (build/bin/croupier), the tests, the benchmarks and the Python
# module, and puts python/ on the .venv's path (development mode).
build: configure
	cmake --build $(BUILD) -j $(JOBS) --target all benchmarks
	@$(PY) scripts/dev_install.py

# What the demo runs: the command and the Python module (no tests, no benchmarks).
build-demo: configure
	cmake --build $(BUILD) -j $(JOBS) --target croupier _croupier
	@$(PY) scripts/dev_install.py

# The C++ tests, the Python tests of croupier's guarantees and adapters in four pytest processes,
# and the type check of the package. The tests that run croupier under engines, launchers and
# installers (Ray, Slurm, horovodrun, the deploy recipes, pip install; tests/conftest.py names
# them) are `make test-engines`; CI runs both.
# `make test-build` builds what they need: the test tier's packages (TensorFlow, JAX, Ray, clang,
# Slurm: one to two minutes of apt and pip) install in the background while croupier and its tests
# compile, which need only the build tier; then it configures again with TensorFlow in and builds
# the TensorFlow op. No benchmarks (`make build` adds them). A failure of either stops it; the
# install's output is in $(TEST_TIER_LOG). CI runs it first, then starts the ASan build beside the
# tests (.ci/run).
# The C++ tests and the type check run beside pytest (scripts/beside.sh), their output in
# $(TEST_CPP_LOG), printed after pytest's: the tests wait much of their time, and the three
# together took 331 s where one after the other they took 402 (docs/build.md). Ctrl-C stops them
# with pytest (--stop-if-interrupted: their own process group, stopped as a whole).
TEST_TIER_LOG = $(BUILD)/bootstrap-test.log
TEST_CPP_LOG = $(BUILD)/test-cpp.log
test: test-build
	@bash scripts/beside.sh --stop-if-interrupted $(TEST_CPP_LOG) \
	  "make test: the C++ tests or the type check" -- \
	  $(MAKE) --no-print-directory -k test-cpp typecheck -- \
	  $(MAKE) --no-print-directory test-python

test-build: configure
	@bash scripts/beside.sh $(TEST_TIER_LOG) "make test: the test tier's install" -- \
	  bash scripts/bootstrap.sh test -- cmake --build $(BUILD) -j $(JOBS)
	$(MAKE) --no-print-directory configure
	cmake --build $(BUILD) -j $(JOBS)
	@$(PY) scripts/dev_install.py

test-engines: bootstrap-engines
	$(MAKE) --no-print-directory build
	$(PY) -m pytest -q -m engines -n $(ENGINE_WORKERS) --dist loadgroup --durations=15

test-cpp:
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) --timeout 600

# PYTEST_WORKERS: the number of pytest processes (pytest-xdist; 0 runs the tests in this process).
# Five on two cores: many tests spend their time waiting (heartbeats, timeouts, the autoscaler's
# hold), and the cores were a third idle under four processes. The tests go to the processes one
# at a time (--maxschedchunk 1), the long ones first (tests/conftest.py), so that no process is
# left alone at the end with a long test: five took 272 s where four took 289 s, and four in
# pytest's default chunks 314 s (docs/build.md, "The long tests first, five pytest processes").
# Every Python test can run beside any other (docs/architecture.md, Conventions). Both runs print
# their slowest tests (--durations), so that a run's log says where its minutes went.
PYTEST_WORKERS ?= 5
# ENGINE_WORKERS: the same for make test-engines, whose files run whole in one process each
# (tests/conftest.py, ENGINE_GROUPS).
ENGINE_WORKERS ?= 2
test-python:
	$(PY) -m pytest -q -m "not engines" -n $(PYTEST_WORKERS) --maxschedchunk 1 --durations=25

# The demo tier's Python packages (PyTorch, scikit-learn, matplotlib: about a minute of pip) install
# in the background while croupier compiles, which needs only the build tier; the demo starts once
# both are done. A failure of either stops it; the install's output is in $(DEMO_LOG).
DEMO_LOG = $(BUILD)/bootstrap-demo.log
demo: configure
	@bash scripts/beside.sh $(DEMO_LOG) "make demo: the demo's Python packages" -- \
	  bash scripts/bootstrap.sh demo -- cmake --build $(BUILD) -j $(JOBS) --target croupier _croupier
	@$(PY) scripts/dev_install.py
	bash scripts/demo.sh

# The same training under OpenMPI's mpirun with an mpi4py all-reduce: the Horovod pattern.
demo-mpi: bootstrap
	$(MAKE) --no-print-directory build-demo
	DEMO_LAUNCHER=mpi bash scripts/demo.sh

bench: bootstrap
	$(MAKE) --no-print-directory build
	$(PY) bench/run.py

# The venv of bench_s3.py's peers (MosaicML Streaming, litdata): scripts/requirements-peers.txt.
bench-peers:
	test -x .venv-peers/bin/python || python3 -m venv .venv-peers
	.venv-peers/bin/python -m pip install -q --disable-pip-version-check \
	  -r scripts/requirements-peers.txt

# The data plane and the end-to-end comparison on less data, in under 2 minutes (bench/out/ only).
bench-quick: bootstrap
	$(MAKE) --no-print-directory build
	$(PY) bench/run.py --quick

# The type checker on the Python package (its settings: [tool.mypy] in pyproject.toml).
# mypy on the package (its settings in pyproject.toml); part of make test.
typecheck: bootstrap
	$(PY) -m mypy
	MYPYPATH=python $(PY) -m mypy.stubtest croupier._croupier --mypy-config-file pyproject.toml \
	  --allowlist python/stubtest_allowlist.txt

format:
	find include src tools python bench -name '*.h' -o -name '*.cc' | xargs clang-format -i

clean:
	rm -rf $(BUILD) python/croupier/_croupier*.so

# --- Hardening: sanitizer builds and fuzzing (docs/robustness.md) ------------------------------
# Each has its own build directory and never touches $(BUILD). They build with clang, which
# needs Debian's libclang-rt-14-dev for the sanitizer and libFuzzer runtimes (in
# scripts/debian-packages.txt). SAN_JOBS stays low: these builds are heavy.
SAN_JOBS ?= 2
SAN_CMAKE := -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCROUPIER_BUILD_BENCH=OFF \
  -DCROUPIER_BUILD_PYTHON=OFF
SAN_TEST_TIMEOUT ?= 900
FUZZ_SECONDS ?= 20
# Every report is fatal; suppressions live in fuzz/*.supp, each with its reason.
ASAN_ENV := ASAN_OPTIONS=halt_on_error=1:abort_on_error=1:detect_leaks=1:strict_string_checks=1:check_initialization_order=1:detect_stack_use_after_return=1 \
  LSAN_OPTIONS=suppressions=$(ROOT)/fuzz/lsan.supp \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
TSAN_ENV := TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1:suppressions=$(ROOT)/fuzz/tsan.supp

.PHONY: asan asan-build tsan fuzz-build fuzz-smoke fuzz

# ASan + UBSan: every C++ test in build-asan. A sanitizer report aborts its test and fails the run.
# The same build directory holds the libFuzzer targets: everything in it is also compiled with
# libFuzzer's coverage instrumentation (fuzzer-no-link, which only counts edges and comparisons for
# a fuzzer to read), so that the fuzz targets link the very objects the tests ran, and the
# library is compiled once under the sanitizers instead of twice.
# -O1 and line tables only (the flags libFuzzer's and OSS-Fuzz's guides use) instead of
# RelWithDebInfo's -O2 -g: stacks still name the file and line, and the build takes a quarter less
# CPU (docs/robustness.md).
SAN_ASAN_CMAKE := $(SAN_CMAKE) -DCROUPIER_SANITIZE=fuzzer-no-link,address,undefined \
  -DCROUPIER_BUILD_FUZZ=ON '-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG'
# `make asan-build` only builds (CI builds it beside the tests: .ci/run).
asan: asan-build
	$(ASAN_ENV) nice ctest --test-dir build-asan --output-on-failure -j $(SAN_JOBS) \
	  --timeout $(SAN_TEST_TIMEOUT)

asan-build: bootstrap
	CC=clang CXX=clang++ cmake -S . -B build-asan $(SAN_ASAN_CMAKE)
	nice cmake --build build-asan -j $(SAN_JOBS)

# TSan: every C++ test in build-tsan, then the multi-process service tests on its binary. abseil
# is built with TSan first (scripts/tsan_abseil.sh, into build-tsan/abseil) and every binary of
# build-tsan loads it through its RPATH: TSan sees abseil's locks only then. The Python test
# process itself stays uninstrumented; only the croupier processes it starts run under TSan.
TSAN_ABSEIL := $(ROOT)/build-tsan/abseil
# The multi-process tests run against build-tsan/bin/croupier. test_limits.py is left out: it
# bounds latency and memory under a flood, which TSan's own cost (5-15x time, 5-10x memory) breaks.
TSAN_SERVICE_TESTS := tests/test_service.py tests/test_faults.py tests/test_faults_more.py \
  tests/test_consumer_restart.py tests/test_shm.py tests/test_tls.py tests/test_compression.py \
  tests/test_serve.py tests/test_hostile.py tests/test_chaos.py tests/test_advice.py \
  tests/test_logs.py
tsan: bootstrap
	bash scripts/tsan_abseil.sh $(TSAN_ABSEIL)
	CC=clang CXX=clang++ cmake -S . -B build-tsan $(SAN_CMAKE) -DCROUPIER_SANITIZE=thread \
	  -DCROUPIER_TSAN_ABSEIL_DIR=$(TSAN_ABSEIL)/lib
	nice cmake --build build-tsan -j $(SAN_JOBS)
	$(TSAN_ENV) nice ctest --test-dir build-tsan --output-on-failure -j $(SAN_JOBS) \
	  --timeout $(SAN_TEST_TIMEOUT)
	rm -rf build-tsan/reports && mkdir -p build-tsan/reports
	$(TSAN_ENV):log_path=$(ROOT)/build-tsan/reports/tsan \
	  CROUPIER_BIN=$(ROOT)/build-tsan/bin/croupier nice timeout 1800 \
	  $(PY) -m pytest -q $(TSAN_SERVICE_TESTS); status=$$?; \
	if ls build-tsan/reports/tsan.* >/dev/null 2>&1; then cat build-tsan/reports/tsan.*; \
	  echo "make tsan: ThreadSanitizer reports from croupier processes (build-tsan/reports)"; \
	  exit 1; fi; exit $$status

# libFuzzer targets (fuzz/), one per parser of outside bytes, in build-asan (see asan above); after
# `make asan` only the targets themselves are left to build.
fuzz-build: bootstrap
	CC=clang CXX=clang++ cmake -S . -B build-asan $(SAN_ASAN_CMAKE)
	nice cmake --build build-asan -j $(SAN_JOBS) --target croupier_fuzzers

# Each fuzzer for FUZZ_SECONDS (20) from its seed corpus; fails on the first crash, leak or
# timeout. New inputs go to build-asan/corpus/<target>, never into the repository's seeds.
fuzz-smoke: fuzz-build
	$(ASAN_ENV) FUZZ_SECONDS=$(FUZZ_SECONDS) bash fuzz/run.sh build-asan

# The same, longer: FUZZ_SECONDS defaults to 300 here unless given.
fuzz: fuzz-build
	$(ASAN_ENV) FUZZ_SECONDS=$(if $(filter command line environment,$(origin FUZZ_SECONDS)),$(FUZZ_SECONDS),300) \
	  bash fuzz/run.sh build-asan
