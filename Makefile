# Two commands do everything on a fresh machine:
#   make demo   an agent tool-calling loop on the default model
#   make test   the test suite
# Both create .venv/, fetch and verify the pinned llama.cpp source, build
# libel_shim.so and fetch the models they need. Downloads and compiler
# output are cached under ~/.cache/pyshim/, so a second run redoes nothing.

SHELL   := /bin/bash
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

.PHONY: all venv vendor build models test test-nopatch bench-status test-install lint demo bench bench-peers bench-overhead bench-decode bench-concurrent bench-door bench-speculative bench-shared-prefix bench-disk-prefix bench-rpc bench-agent bench-determinism rpc-server peers peers-upstream bench-row-cost bench-reuse bench-patches nopatch sanitize sanitize-python soak fuzz-long clean

all: build

venv: $(VENV)/.stamp
$(VENV)/.stamp: pyproject.toml
	$(PYTHON3) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $$($(PYTHON3) scripts/deps.py pyproject.toml)
	touch $@

vendor: venv
	$(PY) scripts/fetch_llama.py

# The library builds against the pinned tree with every patch that applies (vendor/llama.cpp).
# LLAMA_PATCHES=none (or a comma-separated list of native/patches/ names) and LLAMA_CPP_DIR=/path
# (a llama.cpp checkout, copied, never changed) build against a tree of the build's own, so the
# patched one is never touched:
#   make build LLAMA_PATCHES=none BUILD=build-nopatch   ->  build-nopatch/libel_shim.so
# Such a build keeps its tree in $(BUILD)/vendor/llama.cpp and its objects in $(BUILD)/obj: the
# same paths relative to the objects as the default build's, so that ccache (which hashes paths
# relative to where the compiler runs) reuses every object whose source no patch changed.
LLAMA_PATCHES ?= all
LLAMA_CPP_DIR ?=
OWN_TREE  := $(if $(and $(filter all,$(LLAMA_PATCHES)),$(if $(LLAMA_CPP_DIR),,default)),,yes)
LLAMA_SRC := $(if $(OWN_TREE),$(BUILD)/vendor/llama.cpp,vendor/llama.cpp)
OBJ       := $(if $(OWN_TREE),$(BUILD)/obj,$(BUILD))

build: venv
	$(PY) scripts/fetch_llama.py --dest $(LLAMA_SRC) --patches $(LLAMA_PATCHES) $(if $(LLAMA_CPP_DIR),--source $(LLAMA_CPP_DIR))
	test -f $(OBJ)/build.ninja || cmake -S native -B $(OBJ) -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  -DLLAMA_DIR=$(abspath $(LLAMA_SRC)) \
	  -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache $(CMAKE_FLAGS)
	cmake --build $(OBJ) -j $(JOBS) $(if $(OWN_TREE),--target el_shim && ln -sf obj/libel_shim.so $(BUILD)/libel_shim.so)

# The fallback never rots: the library built with no patch at all, and the suites whose code
# paths the patches change run against it (render and tokenizer exactness against the same
# recorded digests as the patched build, tool grammars and parsers, reuse). Without
# ggml-cpu-use-ref-no-sgemm "deterministic" is refused (test_patches checks the refusal) for
# every model the tests use, so the exact oracle cannot run there: test_reuse's KL oracle then
# covers the dense, recurrent and hybrid layouts beside the sliding-window ones.
NOPATCH_TESTS := tests/test_patches.py tests/test_render_exact.py tests/test_token_cache.py tests/test_tool_grammar.py \
                 tests/test_reuse.py tests/test_determinism.py
test-nopatch: models nopatch
	PYSHIM_LIB=$(CURDIR)/build-nopatch/libel_shim.so $(PY) -m pytest $(NOPATCH_TESTS) -q

models: venv
	$(PY) -m pyshim models fetch $(TEST_MODELS)

lint: venv
	$(PY) -m ruff check pyshim tests scripts bench examples
	$(PY) -m ruff format --check pyshim tests scripts bench examples
	$(PY) -m mypy pyshim
	$(PY) -m basedpyright pyshim
	$(PY) scripts/readme_types.py

test: build models lint rpc-server
	$(PY) -m pytest tests -q --durations=25
	$(MAKE) test-nopatch
	$(MAKE) sanitize

# `pip wheel .` from a copy of this tree with empty pyshim and pip caches: compiles llama.cpp
# from scratch (about 7 minutes on 2 cores), so it is not part of `make test`.
test-install: venv
	PYSHIM_TEST_INSTALL=1 $(PY) -m pytest tests/test_install.py -q -s

demo: build
	$(PY) -m pyshim demo

# The shim and llama.cpp's common/ under AddressSanitizer + UndefinedBehaviorSanitizer
# (+ LeakSanitizer), in a build tree of their own: the C ABI test, then, where clang is
# available, a bounded libFuzzer run over the C ABI (FUZZ_SECONDS; `make fuzz-long` for more).
SAN_CC       := $(shell command -v clang >/dev/null 2>&1 && echo clang || echo gcc)
SAN_CXX      := $(if $(filter clang,$(SAN_CC)),clang++,g++)
FUZZ_SECONDS ?= 60
SAN_ENV      := ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
TINY_MAMBA    = $$($(PY) -c "import sys; sys.path[:0] = ['tests', '.']; from tiny_models import tiny_model; print(tiny_model('mamba'))")

# Line tables only for llama.cpp's own code (the shim and common/ keep full -g, from
# EL_SAN_FLAGS): sanitizer reports still name file and line, and llama.cpp compiles ~20 %
# faster here than with full debug information.
SAN_DEBUG := $(if $(filter clang,$(SAN_CC)),-gline-tables-only,-g1)
build-san/build.ninja:
	$(MAKE) vendor
	CC=$(SAN_CC) CXX=$(SAN_CXX) cmake -S native -B build-san -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 $(SAN_DEBUG) -DNDEBUG" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 $(SAN_DEBUG) -DNDEBUG" \
	  -DEL_SANITIZE=ON -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache

sanitize: models build-san/build.ninja
	cmake --build build-san -j $(JOBS)
	$(SAN_ENV) build-san/el_abi_test_san $$($(PY) -m pyshim models fetch smollm2-135m-instruct)
	@if [ -x build-san/el_fuzz ]; then \
	  mkdir -p build-san/fuzz-work && \
	  $(SAN_ENV) EL_FUZZ_MODEL=$(TINY_MAMBA) build-san/el_fuzz -max_total_time=$(FUZZ_SECONDS) -timeout=60 \
	    -rss_limit_mb=6144 -print_final_stats=1 build-san/fuzz-work tests/fuzz/corpus 2>&1 | tail -25; \
	  test $${PIPESTATUS[0]} -eq 0; \
	else echo "sanitize: clang not found, the libFuzzer run is skipped (apt-get install clang libclang-rt-14-dev)"; fi

# The Python suite against the sanitized shim: the ASan runtime is preloaded into Python
# (leak checking off: CPython itself keeps memory to exit). Deselected: the RSS-drift
# tests, which ASan's quarantine defeats by design (LeakSanitizer covers leaks in the C run).
SAN_RUNTIME = $$($(SAN_CC) -print-file-name=$(if $(filter clang,$(SAN_CC)),libclang_rt.asan-x86_64.so,libasan.so))
SAN_PY_ENV = LD_PRELOAD=$(SAN_RUNTIME) ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 PYSHIM_LIB=$(CURDIR)/build-san/libel_shim_asan.so
sanitize-python: build models build-san/build.ninja
	cmake --build build-san -j $(JOBS) --target el_shim_san_shared
	$(SAN_PY_ENV) $(PY) -c "from pyshim import _lib; _lib.lib(); print('sanitize-python: testing', _lib.lib_path)"
	$(SAN_PY_ENV) $(PY) -m pytest tests -q -p no:cacheprovider -k "not flat"

# The full leak soak: 10,000 generate calls on one handle and 200 open/close cycles.
soak: build models
	$(PY) -m scripts.soak

fuzz-long:
	$(MAKE) sanitize FUZZ_SECONDS=1800

# Benchmarks are not tests. `make bench` compares pyshim with llama.cpp's own llama-bench,
# llama-cpp-python and llama-server, all from the pinned tree (docs/bench-peers.md);
# `make bench-reuse` replays one agent session with prompt reuse on and off (docs/bench-reuse.md);
# `make bench-agent` (also part of `make bench`) runs the multi-step agent tasks and the
# single-call set on the catalogue models (docs/bench-agent-tasks.md); `make bench-concurrent`
# (also part of `make bench`) runs 4 agent sessions at once on one handle against the same 4
# taken in turn and llama-server -np 4 (docs/bench-concurrent.md).
PEERS := build-peers
# Every tree configured from vendor/ directly leaves out ggml's AMX kernels, as the shim's
# own build does: they crash in this pinned tree (native/cmake/no_amx.cmake says why).
NO_AMX := -DCMAKE_PROJECT_INCLUDE=$(CURDIR)/native/cmake/no_amx.cmake

# llama-bench, llama-server and a shared libllama.so for llama-cpp-python to load, so that
# the binding (installed without its own copy of llama.cpp) runs the very same engine.
# How every llama.cpp tools tree is configured (peers, peers-upstream).
LLAMA_TOOLS_CMAKE := -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DBUILD_SHARED_LIBS=ON \
	  -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TESTS=OFF \
	  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
	  -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_NUMBER=0 $(NO_AMX)
peers: vendor
	test -f $(PEERS)/build.ninja || cmake -S vendor/llama.cpp -B $(PEERS) $(LLAMA_TOOLS_CMAKE)
	cmake --build $(PEERS) -j $(JOBS) --target llama-bench llama-batched-bench llama-server llama

# llama-bench from the pinned tree with no patch at all (build-nopatch's own copy): the upstream
# floors that bench-peers and bench-overhead hold a next turn to, flash attention on and off
# (bench/common/systems.py's PEERS_UPSTREAM). The peers above run pyshim's patched engine, so that they
# and pyshim differ only in what wraps it; these say what plain llama.cpp costs.
PEERS_UPSTREAM := build-peers-upstream
peers-upstream: nopatch
	test -f $(PEERS_UPSTREAM)/build.ninja || cmake -S build-nopatch/vendor/llama.cpp -B $(PEERS_UPSTREAM) $(LLAMA_TOOLS_CMAKE)
	cmake --build $(PEERS_UPSTREAM) -j $(JOBS) --target llama-bench

# llama.cpp's rpc-server from the same pinned (and patched) tree, in a build dir of its own:
# tests/test_rpc.py and bench/rpc.py start it on loopback. It has no authentication: never
# let it listen on a network you do not trust. CMAKE_FLAGS=-DGGML_CUDA=ON gives a GPU server.
RPC_BUILD := build-rpc
rpc-server: vendor
	test -f $(RPC_BUILD)/build.ninja || cmake -S vendor/llama.cpp -B $(RPC_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DGGML_RPC=ON \
	  -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TESTS=OFF \
	  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_NUMBER=0 $(NO_AMX) $(CMAKE_FLAGS)
	cmake --build $(RPC_BUILD) -j $(JOBS) --target ggml-rpc-server

$(VENV)/.bench-stamp: $(VENV)/.stamp
	CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF" $(PY) -m pip install --quiet \
	  "$$($(PY) scripts/fetch_llama.py --archive)" matplotlib "pydantic-ai-slim[openai]>=1.0"
	touch $@

bench-peers: build models peers peers-upstream $(VENV)/.bench-stamp
	$(PY) -m bench.peers --out docs/bench-peers.md --chart docs/bench-peers-ttft.png

# An agent's next turn at ~1k, ~4k and ~16k tokens, by the wall, pyshim beside llama-server and
# llama-cpp-python (and pyshim with flash attention off, llama-cpp-python's setting), with the engine floor for the same tokens at that depth (llama-bench, same run):
# the peers run's next-turn workloads alone (docs/bench-overhead.md).
bench-overhead: build models peers peers-upstream $(VENV)/.bench-stamp
	$(PY) -m bench.peers --workloads overhead-1k overhead-4k overhead-16k \
	  --systems pyshim llama-server llama-cpp-python pyshim-fa-off --out docs/bench-overhead.md

bench: bench-patches bench-peers bench-overhead bench-decode bench-concurrent bench-door bench-rpc bench-agent bench-determinism bench-speculative bench-row-cost bench-shared-prefix bench-disk-prefix bench-reuse
	$(MAKE) bench-status

# Each report in docs/ with its commit and how many library commits it is behind HEAD; fails when
# the README cites one more than 20 behind without calling it stale.
bench-status: venv
	$(PY) scripts/bench_status.py

# Decode greedy and sampled, with and without tools, beside llama-bench tg128 (docs/bench-decode.md).
bench-decode: build models peers
	$(PY) -m bench.decode --out docs/bench-decode.md

# 4 agent sessions on one n_seq-4 handle from 4 threads, vs serialized and llama-server -np 4.
bench-concurrent: build models peers $(VENV)/.bench-stamp
	$(PY) -m bench.concurrent --out docs/bench-concurrent.md

# What the `deterministic` option costs: prefill and decode off vs on (docs/bench-determinism.md).
bench-determinism: build models
	$(PY) -m bench.determinism --out docs/bench-determinism.md

# The OpenAI door's overhead per call: the 20-turn agent session in-process and through `pyshim serve`.
bench-door: build models
	$(PY) -m bench.door --out docs/bench-door.md
	$(PY) -m bench.door_routes --out docs/bench-door-routes.md

# The library built with no patch at all (build-nopatch/libel_shim.so).
nopatch: venv
	$(MAKE) build LLAMA_PATCHES=none BUILD=build-nopatch

# The patched library beside one built with no patches, alternating (docs/bench-patches.md);
# then each patch judged on its own (docs/patches.md, "Measured gains"): beside builds that
# lack it (and, in the render chain, the patches that need it), made as build-without-NAME.
PREPARE_CHAIN := common-shared-values-message-ids common-shared-values-last-message \
                 common-shared-message-values common-render-memo-loops common-render-faster common-chat-analyse-once
bench-patches: build models
	$(MAKE) nopatch
	$(PY) -m bench.patches --out docs/bench-patches.md
	$(PY) -m bench.patches --without common-return-parser-object common-sampling-grammar-cache \
	  --no-unpatched --models gemma-3-270m --out docs/bench-patches-leave-one-out.md
	$(PY) -m bench.patches --without $(PREPARE_CHAIN) --no-unpatched --models gemma-3-270m --turns 145 \
	  --out docs/bench-patches-chain.md
	$(PY) -m bench.patches --without common-render-faster common-chat-analyse-once --no-unpatched \
	  --models qwen2.5-coder-0.5b-instruct --out docs/bench-patches-analyse-once.md

# Decode with and without self-speculation, beside llama-server's (docs/bench-speculative.md).
bench-speculative: build models peers peers-upstream
	$(PY) -m bench.speculative --out docs/bench-speculative.md

# A batch of 1-32 rows at depths 2k-16k: pyshim's engine beside plain llama.cpp, fa on and off
# (docs/bench-row-cost.md).
bench-row-cost: build models peers peers-upstream
	$(PY) -m bench.row_cost --out docs/bench-row-cost.md

# K conversations sharing one system prompt: tokens evaluated and wall, beside llama-server
# (docs/bench-shared-prefix.md).
bench-shared-prefix: build models peers
	$(PY) -m bench.shared_prefix --out docs/bench-shared-prefix.md

# A second process of the same agent script, from the disk tier, beside llama-server restarted
# (docs/bench-disk-prefix.md).
bench-disk-prefix: build models peers
	$(PY) -m bench.disk_prefix --out docs/bench-disk-prefix.md

# Local-only vs split over one and two loopback rpc-servers (docs/bench-rpc.md).
bench-rpc: build models rpc-server
	$(PY) -m bench.rpc --out docs/bench-rpc.md

# Multi-step tool tasks through pyshim.Agent on the catalogue models, both modes, beside
# openai-agents and pydantic-ai driving the same model through `pyshim serve` (docs/bench-agent-tasks.md;
# the raw runs beside it, so that a batch run alone can be merged in with --load).
bench-agent: build models $(VENV)/.bench-stamp
	$(PY) -m bench.agent_tasks --modes loop plan openai-agents pydantic-ai \
	  --json docs/bench-agent-tasks.json --out docs/bench-agent-tasks.md

bench-reuse: build models
	$(PY) -m bench.agent_session --out docs/bench-reuse.md

clean:
	rm -rf $(BUILD) build-san $(PEERS) $(RPC_BUILD) vendor/llama.cpp.partial
