# Two commands do everything on a fresh machine:
#   make demo   an agent tool-calling loop on the default model
#   make test   the test suite
# Both create .venv/, fetch and verify the pinned llama.cpp source, build
# libel_shim.so and fetch the models they need. Downloads and compiler
# output are cached under ~/.cache/pyshim/, so a second run redoes nothing.

PYTHON3 ?= python3
VENV    := .venv
PY      := $(VENV)/bin/python
BUILD   ?= build
CACHE   ?= $(HOME)/.cache/pyshim
JOBS    ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=

export CCACHE_DIR     ?= $(CACHE)/ccache
export CCACHE_BASEDIR := $(CURDIR)
export PATH           := $(CURDIR)/$(VENV)/bin:$(PATH)

TEST_MODELS := qwen2.5-coder-0.5b-instruct gemma-3-270m smollm2-135m-instruct

.PHONY: all venv vendor build models test lint demo bench asan clean

all: build

venv: $(VENV)/.stamp
$(VENV)/.stamp: pyproject.toml
	$(PYTHON3) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $$($(PYTHON3) scripts/deps.py pyproject.toml)
	touch $@

vendor: venv
	$(PY) scripts/fetch_llama.py

build: vendor
	test -f $(BUILD)/build.ninja || cmake -S native -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

models: venv
	$(PY) -m pyshim models fetch $(TEST_MODELS)

lint: venv
	$(PY) -m ruff check pyshim tests scripts bench examples
	$(PY) -m ruff format --check pyshim tests scripts bench examples

test: build models lint
	$(PY) -m pytest tests -q

demo: build
	$(PY) -m pyshim demo

# The library and the C ABI test under AddressSanitizer + UndefinedBehaviorSanitizer +
# LeakSanitizer, in a build tree of their own.
asan: vendor models
	test -f build-asan/build.ninja || cmake -S native -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DEL_SANITIZE=ON -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
	cmake --build build-asan -j $(JOBS) --target el_abi_test
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  build-asan/el_abi_test $$($(PY) -m pyshim models fetch smollm2-135m-instruct)

bench: build models
	$(PY) -m bench.agent_session --out docs/bench-reuse.md

clean:
	rm -rf $(BUILD) vendor/llama.cpp.partial
