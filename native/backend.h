// backend.h -- llama.cpp's process-wide state: backend initialisation and its log.
//
// Invariant: llama.cpp is initialised once per process, before any model loads, and
// its log is silent unless a handle asks for it; the errors it logs on the calling
// thread are kept so that a failed el_open can say *why* llama.cpp refused a model.
#pragma once

#include <string>

struct llama_context;

namespace el {

// Idempotent and thread-safe.
void init_backend_once();

// From now on, let llama.cpp print its log to stderr (config "log": true).
void enable_log_to_stderr();

// Whether the context computes attention with flash attention: its resolved setting
// (after "auto" is decided), read back from the context rather than from our config.
bool context_uses_flash_attn(const llama_context * ctx);

// Put the context's CPU backend on ggml's reference kernels: every matrix multiply through
// the per-row vec_dot path and flash attention one query at a time, whatever the batch
// size (ggml otherwise switches to tiled kernels at 8 rows, and to split-KV attention for
// single queries over long caches, each with its own reduction order).
void use_reference_cpu_kernels(llama_context * ctx);

// llama.cpp's error lines logged on this thread since the last clear (bounded).
std::string & thread_log_errors();

}  // namespace el
