// el_shim.cpp -- the C entry points of el_shim.h: the handle registry and the one place
// where exceptions stop.
//
// The story of one call, and the file that tells each part:
//   1. the C entry points (this file) look the handle up and catch every exception,
//      turning it into {"error": ..., "code": ...} (error.h says how each is classed);
//      calls on one handle run at once (the engine's scheduler orders their
//      evaluations); nothing below worries about the ABI;
//   2. request.cpp turns the JSON into a runnable request: request_options.cpp reads and
//      checks the arguments (json_args.cpp; test_hooks.cpp the "_test" option, compiled
//      only with EL_TEST_HOOKS), rendering.cpp renders the prompt with the model's own
//      chat template (llama.cpp's common/chat) and tokenizes only what is new in it
//      (token_cache.cpp), grammar_choice.cpp chooses the grammar (tool_grammar.cpp: forced
//      calls, and bare-JSON calls constrained once begun);
//   3. slots.cpp picks the conversation slot, and prompt_cache.cpp reuses the longest
//      prefix of the prompt that the KV cache really holds, trimming or restoring a
//      checkpoint;
//   4. engine.cpp prefills the rest and runs the decode loop, streaming deltas through
//      delta_stream.cpp; token_choice.cpp picks each next token (the argmax, or
//      common/sampling's chain) and its logprobs; evaluation.cpp runs every
//      llama_decode, in turns that scheduler.cpp gives out (with n_seq >= 2 one decode
//      step carries every running call's next token), on the one thread per process
//      that compute_lane.cpp keeps for ggml's OpenMP team; with remote devices, rpc.cpp
//      probes the servers and turns a lost one into a dead handle;
//   5. result.cpp parses the text back into content, reasoning and tool calls
//      (common/chat), recovers a tool call written as bare JSON (tool_recovery.cpp),
//      sets aside calls whose arguments fail their schema (schema_check.cpp), and
//      writes the result JSON.
// opening.cpp loads the model and creates its context, stats.cpp reports on it, embed_call.cpp
// serves el_embed with embedding.cpp's context; config.cpp parses el_open's
// settings; timing.h is the clock every ms_* figure is read from; backend.cpp owns
// llama.cpp's process-wide initialisation and log; rpc.cpp joins remote devices
// (llama.cpp's rpc-server) to a model.

#include "el_shim.h"

#include "engine.h"
#include "json_args.h"
#include "patched.h"
#include "request.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <chrono>
#include <thread>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <pthread.h>

using el::Engine;
using el::json;

#ifndef EL_LLAMA_COMMIT
#define EL_LLAMA_COMMIT "0c1e570"
#endif

namespace {

char * to_c_string(const std::string & s) {
    char * out = static_cast<char *>(std::malloc(s.size() + 1));
    if (out == nullptr) {
        return nullptr;
    }
    std::memcpy(out, s.data(), s.size() + 1);
    return out;
}

using el::error_json;

// An exception as the error object of the ABI; `other` classes what is not an el::Error.
std::string error_of(const std::exception & e, el_code other) {
    const auto * coded = dynamic_cast<const el::Error *>(&e);
    return error_json(coded != nullptr ? coded->code : other, e.what());
}

}  // namespace

// ---------------------------------------------------------------------------
// Handles: opaque tokens looked up in a registry, never dereferenced, so a
// closed or bogus handle is an error rather than undefined behaviour.
// ---------------------------------------------------------------------------

namespace {

std::mutex g_registry_mu;
std::unordered_map<uintptr_t, std::shared_ptr<Engine>> g_registry;
uintptr_t g_next_handle = 0x1000;  // never reused, never a real address we own
thread_local std::string t_last_error = "{}";

// Handles this process inherited through fork(): their engines' threads (the evaluator, the
// RPC watchdog) exist only in the parent, so nothing of them may run, wait or be freed here.
// Both are created in the child and never destroyed, so no destructor at exit reaches them.
std::unordered_set<uintptr_t> *        g_inherited = nullptr;
std::vector<std::shared_ptr<Engine>> * g_orphans   = nullptr;

const char * const kClosed    = "invalid or closed handle";
const char * const kInherited = "this handle was opened by the parent process before fork(); a handle does not "
                                "survive fork(): open a new one in this process";

// fork() while another thread holds the registry would leave the child a registry in an
// unknown state: the fork waits for it, and the child takes every handle out of it.
void registry_before_fork() { g_registry_mu.lock(); }
void registry_after_fork_in_parent() { g_registry_mu.unlock(); }
void registry_after_fork_in_child() {
    if (g_inherited == nullptr) {
        g_inherited = new std::unordered_set<uintptr_t>();
        g_orphans   = new std::vector<std::shared_ptr<Engine>>();
    }
    for (auto & [id, engine] : g_registry) {
        g_inherited->insert(id);
        g_orphans->push_back(std::move(engine));
    }
    g_registry.clear();
    g_registry_mu.unlock();  // locked by this thread, the one fork() left
}
[[maybe_unused]] const bool g_fork_handlers =
    pthread_atfork(registry_before_fork, registry_after_fork_in_parent, registry_after_fork_in_child) == 0;

// Why a handle that is not in the registry cannot be used. Under g_registry_mu.
const char * unusable(el_handle * h) {
    return g_inherited != nullptr && g_inherited->count(reinterpret_cast<uintptr_t>(h)) ? kInherited : kClosed;
}

std::shared_ptr<Engine> lookup(el_handle * h, const char ** why = nullptr) {
    std::lock_guard<std::mutex> lock(g_registry_mu);
    auto it = g_registry.find(reinterpret_cast<uintptr_t>(h));
    if (it == g_registry.end()) {
        if (why != nullptr) {
            *why = unusable(h);
        }
        return nullptr;
    }
    return it->second;
}

// The error object of the exception in flight; only inside a catch block. `other` classes an
// exception that is not an el::Error (error.h).
std::string current_error(el_code other) {
    try {
        throw;
    } catch (const std::bad_alloc &) {
        return error_json(EL_E_NO_MEMORY, "out of memory");
    } catch (const std::exception & e) {
        return error_of(e, other);
    } catch (...) {
        return error_json(EL_E_INTERNAL, "unknown internal error");
    }
}

// The one place where exceptions stop: everything below the C ABI may throw.
template <typename F> char * guarded(F && body) {
    std::string out;
    try {
        out = body();
    } catch (...) {
        out = current_error(EL_E_INTERNAL);
    }
    char * s = to_c_string(out);
    return s != nullptr ? s : to_c_string("{\"error\":\"out of memory\",\"code\":11}");
}

// The same for an int-returning entry point: 0, or -1 with el_last_error() saying why.
template <typename F> int checked(F && body) {
    try {
        body();
        t_last_error = "{}";
        return 0;
    } catch (...) {
        t_last_error = current_error(EL_E_INTERNAL);
    }
    return -1;
}

// Why `h` cannot be used, thrown (EL_E_CLOSED). Takes the registry lock.
[[noreturn]] void throw_unusable(el_handle * h) {
    std::lock_guard<std::mutex> lock(g_registry_mu);
    el::fail(EL_E_CLOSED, unusable(h));
}

// A handle's engine with its lock held, or no engine when the handle is invalid or was
// closed while this thread waited for the lock. The closing flag, not a second registry
// lookup, is what tells: el_close sets it before it waits, and it is never reset.
struct Locked {
    std::shared_ptr<Engine>      engine;
    std::unique_lock<std::mutex> lock;
};

Locked lock_engine(el_handle * handle) {
    Locked l;
    l.engine = lookup(handle);
    if (l.engine) {
        l.lock = std::unique_lock<std::mutex>(l.engine->mu);
        if (l.engine->closing) {
            l.lock.unlock();
            l.engine.reset();  // el_close holds its own reference until this one is gone
        }
    }
    return l;
}

char * generate_on(el_handle * handle, const char * messages_json, const char * tools_json, const char * options_json,
                   el_stream_cb callback, void * user_data) {
    return guarded([&]() -> std::string {
        // The reference keeps the engine alive through the call (el_close waits for it).
        // The cancel epoch is read before the call waits for its turn: an el_cancel that
        // comes while this call waits (or runs) stops it, whatever the timing.
        const char *                  why = kClosed;
        const std::shared_ptr<Engine> e   = lookup(handle, &why);
        if (!e || e->closing) {
            return error_json(EL_E_CLOSED, why);
        }
        return e->run(messages_json, tools_json, options_json, callback, user_data, e->cancel_epoch.load());
    });
}

}  // namespace

extern "C" {

EL_API const char * el_version(void) { return EL_ABI_VERSION " (llama.cpp " EL_LLAMA_COMMIT ")"; }

EL_API const char * el_build_info(void) { return el::patched::build_info(); }

EL_API const char * el_last_error(void) { return t_last_error.c_str(); }

EL_API el_handle * el_open(const char * config_json) {
    try {
        auto e = std::make_shared<Engine>();
        e->open(config_json);
        std::lock_guard<std::mutex> lock(g_registry_mu);
        const uintptr_t id = g_next_handle;
        g_next_handle += 0x10;
        g_registry.emplace(id, std::move(e));
        t_last_error = "{}";
        return reinterpret_cast<el_handle *>(id);
    } catch (...) {
        t_last_error = current_error(EL_E_LOAD);  // llama.cpp's own throws while loading
    }
    return nullptr;
}

EL_API char * el_generate(el_handle * handle, const char * messages_json, const char * tools_json,
                          const char * options_json) {
    return generate_on(handle, messages_json, tools_json, options_json, nullptr, nullptr);
}

EL_API char * el_generate_stream(el_handle * handle, const char * messages_json, const char * tools_json,
                                 const char * options_json, el_stream_cb callback, void * user_data) {
    return generate_on(handle, messages_json, tools_json, options_json, callback, user_data);
}

EL_API char * el_embed(el_handle * handle, const char * input_json, const char * options_json) {
    return guarded([&]() -> std::string {
        // As generate_on: the reference keeps the engine alive (el_close waits for it), and
        // the epoch read first is what el_cancel's later bump is measured against.
        const char *                  why = kClosed;
        const std::shared_ptr<Engine> e   = lookup(handle, &why);
        if (!e || e->closing) {
            return error_json(EL_E_CLOSED, why);
        }
        return e->embed(input_json, options_json, e->cancel_epoch.load());
    });
}

EL_API int el_cancel(el_handle * handle) {
    return checked([&] {
        // Under the registry lock and without taking a reference: el_cancel never ends up
        // holding the last reference to an engine, so it never frees a model (or blocks).
        std::unique_lock<std::mutex> lock(g_registry_mu);
        auto it = g_registry.find(reinterpret_cast<uintptr_t>(handle));
        if (it == g_registry.end()) {
            el::fail(EL_E_CLOSED, unusable(handle));
        }
        it->second->cancel_epoch.fetch_add(1);
    });
}

EL_API int el_cancel_request(el_handle * handle, const char * request_id) {
    return checked([&] {
        if (request_id == nullptr || *request_id == '\0') {
            el::fail("request_id must be a non-empty string");
        }
        const std::string id(request_id);
        if (id.size() > el::kMaxRequestId) {
            el::fail("request_id is longer than " + std::to_string(el::kMaxRequestId) + " bytes");
        }
        // As el_cancel: under the registry lock, never holding the last reference.
        std::lock_guard<std::mutex> lock(g_registry_mu);
        auto it = g_registry.find(reinterpret_cast<uintptr_t>(handle));
        if (it == g_registry.end()) {
            el::fail(EL_E_CLOSED, unusable(handle));
        }
        it->second->cancel_request(id);
    });
}

EL_API int el_forget(el_handle * handle, const char * session) {
    return checked([&] {
        const std::shared_ptr<Engine> e = lookup(handle);
        if (!e) {
            throw_unusable(handle);
        }
        e->forget(nullptr, session);
    });
}

EL_API int el_forget_scope(el_handle * handle, const char * scope, const char * session) {
    return checked([&] {
        if (scope == nullptr) {
            el::fail("el_forget_scope needs a scope (\"\" is one; el_forget forgets in the default scope)");
        }
        const std::shared_ptr<Engine> e = lookup(handle);
        if (!e) {
            throw_unusable(handle);
        }
        e->forget(scope, session);
    });
}

EL_API int el_reset(el_handle * handle) { return el_forget(handle, nullptr); }

EL_API char * el_stats(el_handle * handle) {
    return guarded([&]() -> std::string {
        Locked l = lock_engine(handle);
        if (!l.engine) {
            throw_unusable(handle);
        }
        if (!l.engine->dead_reason().empty()) {
            return error_json(EL_E_DEVICE, l.engine->dead_reason());
        }
        return el::dump(l.engine->stats());
    });
}

EL_API int el_close(el_handle * handle) {
    return checked([&] {
        std::shared_ptr<Engine> e;
        {
            std::lock_guard<std::mutex> lock(g_registry_mu);
            auto it = g_registry.find(reinterpret_cast<uintptr_t>(handle));
            if (it == g_registry.end()) {
                // inherited through fork(): forgotten here, never freed (its threads are
                // the parent's), so closing it neither blocks nor touches the parent's state
                if (g_inherited == nullptr || g_inherited->erase(reinterpret_cast<uintptr_t>(handle)) == 0) {
                    el::fail(EL_E_CLOSED, kClosed);
                }
                return;
            }
            e = std::move(it->second);
            g_registry.erase(it);
        }
        e->closing = true;  // stops a call in progress; no call starts on it any more
        // Wait until every thread that looked the handle up before it left the registry
        // has let go (a running call returns "cancelled", a waiting one "closed"), so
        // that the engine, model and context are freed here, on the closing thread.
        for (;;) {
            { std::lock_guard<std::mutex> lock(e->mu); }
            if (e.use_count() == 1) {
                break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        e.reset();
    });
}

EL_API void el_free(char * str) { std::free(str); }

}  // extern "C"
