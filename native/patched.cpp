// patched.cpp: the patch-dependent calls of patched.h, each with its upstream stand-in.
// Every #if here names the patch (EL_PATCH_<NAME>, set by CMake from the tree's
// .pyshim-patches) whose API it uses; the #else is what the shim does on a tree without it.
#include "patched.h"

#include "el_shim.h"
#include "json_args.h"

#include <algorithm>

#include "ggml-rpc.h"
#include "ggml.h"
#include "jinja/runtime.h"
#include "llama-model.h"  // private: deterministic_refusal reads the model's weight types

#ifndef EL_PATCHES_APPLIED
#define EL_PATCHES_APPLIED ""
#endif
#ifndef EL_PATCHES_MISSING
#define EL_PATCHES_MISSING ""
#endif

namespace el::patched {

#ifndef EL_LLAMA_COMMIT
#define EL_LLAMA_COMMIT "unknown"
#endif

namespace {

json names(const std::string & list) {
    json out = json::array();
    for (size_t at = 0; at < list.size();) {
        const size_t end = std::min(list.find(',', at), list.size());
        out.push_back(list.substr(at, end - at));
        at = end + 1;
    }
    return out;
}

}  // namespace

const char * build_info() {
    static const std::string info = [] {
        json losses = json::object();
#ifndef EL_PATCH_GGML_RPC_NO_ABORT
        losses["ggml-rpc-no-abort"] = "\"rpc\" is refused: upstream aborts the process when an rpc-server fails";
#endif
#ifndef EL_PATCH_GGML_CPU_USE_REF_NO_SGEMM
        losses["ggml-cpu-use-ref-no-sgemm"] =
            "\"deterministic\" is refused for models with F32, F16, BF16, Q8_0, Q4_0, Q5_0 or IQ4_NL matrices";
#endif
        return dump(json{{"abi_version", EL_ABI_VERSION},
                         {"llama_cpp", EL_LLAMA_COMMIT},
                         {"patches", names(EL_PATCHES_APPLIED)},
                         {"patches_missing", names(EL_PATCHES_MISSING)},
                         {"losses", losses}});
    }();
    return info.c_str();
}

std::shared_ptr<common_chat_msg_values> message_values_init() {
#ifdef EL_PATCH_COMMON_SHARED_MESSAGE_VALUES
    return common_chat_msg_values_init();
#else
    return nullptr;  // every render converts every message
#endif
}

void share_message_values(common_chat_templates_inputs & in, const std::shared_ptr<common_chat_msg_values> & values,
                          const std::string & scope) {
#ifdef EL_PATCH_COMMON_SHARED_MESSAGE_VALUES
    in.message_values       = values;
    in.message_values_scope = scope;
#else
    (void) in, (void) values, (void) scope;
#endif
}

bool shares_message_values(const common_chat_templates_inputs & in) {
#ifdef EL_PATCH_COMMON_SHARED_MESSAGE_VALUES
    return in.message_values != nullptr;
#else
    (void) in;
    return false;
#endif
}

void stop_sharing_message_values(common_chat_templates_inputs & in) {
#ifdef EL_PATCH_COMMON_SHARED_MESSAGE_VALUES
    in.message_values = nullptr;
#else
    (void) in;
#endif
}

void set_message_ids(common_chat_templates_inputs & in, const std::vector<uint64_t> & ids) {
#ifdef EL_PATCH_COMMON_SHARED_VALUES_MESSAGE_IDS
    in.message_ids = ids;
#else
    (void) in, (void) ids;  // each message's value is built from its JSON
#endif
}

void drop_last_message_id(common_chat_templates_inputs & in) {
#ifdef EL_PATCH_COMMON_SHARED_VALUES_MESSAGE_IDS
    if (!in.message_ids.empty()) {
        in.message_ids.pop_back();
    }
#else
    (void) in;
#endif
}

void prompt_only(common_chat_templates_inputs & in) {
#ifdef EL_PATCH_COMMON_RENDER_FASTER
    in.prompt_only = true;
#else
    (void) in;  // the render also builds a parser, which is dropped
#endif
}

void want_parser_object(common_chat_templates_inputs & in) {
#ifdef EL_PATCH_COMMON_RETURN_PARSER_OBJECT
    in.parser_object = true;
#else
    (void) in;  // the parser comes saved, and is loaded back (request.cpp)
#endif
}

bool take_parser_object(common_chat_params & chat, common_chat_parser_params & parser) {
#ifdef EL_PATCH_COMMON_RETURN_PARSER_OBJECT
    if (chat.parser_arena) {
        parser.parser = std::move(*chat.parser_arena);
        return true;
    }
#else
    (void) chat, (void) parser;
#endif
    return false;
}

void watch_last_message() {
#ifdef EL_PATCH_COMMON_SHARED_VALUES_LAST_MESSAGE
    jinja::render_watch_thread() = {};
#endif
}

std::string watched_last_message() {
#ifdef EL_PATCH_COMMON_SHARED_VALUES_LAST_MESSAGE
    std::string text = std::move(jinja::render_watch_thread().text);
    jinja::render_watch_thread() = {};
    return text;
#else
    return "";  // where the last message starts is found by rendering the history again
#endif
}

uint64_t render_memo_hits() {
#ifdef EL_PATCH_COMMON_RENDER_MEMO_LOOPS
    return jinja::loop_memo_thread_stats().hits;
#else
    return 0;
#endif
}

common_grammar_cache * grammar_cache_init() {
#ifdef EL_PATCH_COMMON_SAMPLING_GRAMMAR_CACHE
    return common_grammar_cache_init();
#else
    return nullptr;  // every sampler parses its grammar
#endif
}

void grammar_cache_free(common_grammar_cache * cache) {
#ifdef EL_PATCH_COMMON_SAMPLING_GRAMMAR_CACHE
    common_grammar_cache_free(cache);
#else
    (void) cache;
#endif
}

void use_grammar_cache(common_params_sampling & s, common_grammar_cache * cache) {
#ifdef EL_PATCH_COMMON_SAMPLING_GRAMMAR_CACHE
    s.grammar_cache = cache;
#else
    (void) s, (void) cache;
#endif
}

void rpc_require(const std::string & endpoint) {
#ifndef EL_PATCH_GGML_RPC_NO_ABORT
    fail("\"rpc\" (" + endpoint +
         ") needs the ggml-rpc-no-abort patch, which this build of llama.cpp lacks: without it a "
         "failed round trip to an rpc-server aborts the whole process (docs/patches.md)");
#else
    (void) endpoint;
#endif
}

void rpc_set_timeouts(int connect_ms, int io_ms) {
#ifdef EL_PATCH_GGML_RPC_NO_ABORT
    ggml_backend_rpc_set_timeouts(connect_ms, io_ms);
#else
    (void) connect_ms, (void) io_ms;
#endif
}

bool rpc_check(const char * endpoint) {
#ifdef EL_PATCH_GGML_RPC_NO_ABORT
    return ggml_backend_rpc_check(endpoint);
#else
    (void) endpoint;
    return true;  // unreachable: rpc_require refused first
#endif
}

uint64_t rpc_failures(const char * endpoint) {
#ifdef EL_PATCH_GGML_RPC_NO_ABORT
    return ggml_backend_rpc_failures(endpoint);
#else
    (void) endpoint;
    return 0;
#endif
}

void rpc_interrupt(const char * endpoint) {
#ifdef EL_PATCH_GGML_RPC_NO_ABORT
    ggml_backend_rpc_interrupt(endpoint);
#else
    (void) endpoint;
#endif
}

std::string deterministic_refusal(const llama_model * model) {
#ifdef EL_PATCH_GGML_CPU_USE_REF_NO_SGEMM
    (void) model;
    return "";
#else
    // the weight types llamafile_sgemm takes (ggml-cpu/llamafile/sgemm.cpp), for matrices only
    for (const auto & [name, t] : model->tensors_by_name) {
        switch (t->type) {
            case GGML_TYPE_F32:
            case GGML_TYPE_F16:
            case GGML_TYPE_BF16:
            case GGML_TYPE_Q8_0:
            case GGML_TYPE_Q4_0:
            case GGML_TYPE_Q5_0:
            case GGML_TYPE_IQ4_NL:
                if (ggml_n_dims(t) >= 2) {
                    return "\"deterministic\" needs the ggml-cpu-use-ref-no-sgemm patch for this model, which this build "
                           "of llama.cpp lacks: its " + std::string(ggml_type_name(t->type)) + " weights (" + name +
                           ") go through llamafile's sgemm in batches of two or more rows, which rounds otherwise than "
                           "one row at a time (docs/patches.md)";
                }
                break;
            default:
                break;
        }
    }
    return "";
#endif
}

}  // namespace el::patched
