// backend.cpp -- llama.cpp's backend init and log routing; see backend.h.

#include "backend.h"

#include "common.h"
#include "ggml-cpu.h"
#include "llama-context.h"  // private: see context_uses_flash_attn, use_reference_cpu_kernels
#include "llama.h"
#include "log.h"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace el {

namespace {

std::atomic<bool> g_log_to_stderr{false};
thread_local std::string t_log_errors;

void log_callback(ggml_log_level level, const char * text, void *) {
    if (level == GGML_LOG_LEVEL_ERROR && t_log_errors.size() < 4096) {
        t_log_errors += text;
    }
    if (g_log_to_stderr.load()) {
        std::fputs(text, stderr);
    }
}

}  // namespace

void init_backend_once() {
    static std::once_flag once;
    std::call_once(once, [] {
        llama_log_set(log_callback, nullptr);
        common_log_pause(common_log_main());  // common/'s own logger prints from a thread of its own
        llama_backend_init();
    });
}

void enable_log_to_stderr() { g_log_to_stderr = true; }

// llama.h has no getter for this; llama_context keeps the resolved value in its cparams,
// which is what its graph builder reads to choose the attention kernel.
bool context_uses_flash_attn(const llama_context * ctx) { return ctx->get_cparams().flash_attn; }

// llama.h does not expose the context's backends; its scheduler (private header) lists them.
// ggml's CPU backend keeps the flag in its own context and copies it into every graph plan.
void use_reference_cpu_kernels(llama_context * ctx) {
    ggml_backend_sched_t sched = ctx->get_sched();
    for (int i = 0; i < ggml_backend_sched_get_n_backends(sched); i++) {
        ggml_backend_t backend = ggml_backend_sched_get_backend(sched, i);
        if (ggml_backend_is_cpu(backend)) {
            ggml_backend_cpu_set_use_ref(backend, true);
        }
    }
}

std::string & thread_log_errors() { return t_log_errors; }

}  // namespace el
