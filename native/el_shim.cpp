// el_shim.cpp -- the JSON-in/JSON-out C ABI over llama.cpp declared in el_shim.h.
//
// The story of one call, top to bottom:
//   1. the C entry points (bottom of the file) catch every exception and turn
//      it into {"error": ...}; nothing else in this file worries about the ABI;
//   2. parse_request() validates the JSON and renders the prompt with the
//      model's own chat template (llama.cpp's common/chat);
//   3. PromptCache::prepare() reuses the longest prefix of the prompt that the
//      KV cache really holds, trimming or restoring a checkpoint;
//   4. Engine::run() evaluates the rest and samples (common/sampling);
//   5. the text is parsed back into content, reasoning and tool calls
//      (common/chat), a tool call written as bare JSON is recovered, and the
//      result is written as JSON.

#include "el_shim.h"

#include "chat.h"
#include "common.h"
#include "json-schema-to-grammar.h"
#include "llama.h"
#include "log.h"
#include "sampling.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

using json = nlohmann::ordered_json;

#ifndef EL_LLAMA_COMMIT
#define EL_LLAMA_COMMIT "0c1e570"
#endif

namespace {

// ---------------------------------------------------------------------------
// Errors and small helpers
// ---------------------------------------------------------------------------

// A problem with what the caller sent. Everything else that is thrown is an
// internal failure; both become {"error": ...} at the ABI boundary.
struct UserError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

[[noreturn]] void fail(const std::string & msg) { throw UserError(msg); }

// Model output is arbitrary bytes: a token can end inside a UTF-8 sequence,
// and a tiny model can emit invalid ones. Replace rather than throw.
std::string dump(const json & j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

char * to_c_string(const std::string & s) {
    char * out = static_cast<char *>(std::malloc(s.size() + 1));
    if (out == nullptr) {
        return nullptr;
    }
    std::memcpy(out, s.data(), s.size() + 1);
    return out;
}

std::string error_json(const std::string & msg) { return dump(json{{"error", msg}}); }

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

json parse_json_arg(const char * text, const char * what) {
    if (text == nullptr) {
        fail(std::string(what) + " is NULL");
    }
    try {
        return json::parse(text);
    } catch (const json::exception & e) {
        fail(std::string(what) + " is not valid JSON: " + e.what());
    }
}

// Typed getters that name the key in their error, instead of nlohmann's
// "type must be number, but is string".
const json * find(const json & obj, const char * key) {
    auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
}

double get_number(const json & obj, const char * key, double def, double lo, double hi) {
    const json * v = find(obj, key);
    if (v == nullptr) {
        return def;
    }
    if (!v->is_number()) {
        fail(std::string("\"") + key + "\" must be a number");
    }
    double d = v->get<double>();
    if (!std::isfinite(d) || d < lo || d > hi) {
        fail(std::string("\"") + key + "\" must be between " + std::to_string(lo) + " and " + std::to_string(hi));
    }
    return d;
}

int64_t get_int(const json & obj, const char * key, int64_t def, int64_t lo, int64_t hi) {
    const json * v = find(obj, key);
    if (v == nullptr) {
        return def;
    }
    if (!v->is_number_integer() && !v->is_number_unsigned()) {
        fail(std::string("\"") + key + "\" must be an integer");
    }
    const bool in_range = v->is_number_unsigned()
                              ? v->get<uint64_t>() <= (uint64_t) hi && (lo <= 0 || v->get<uint64_t>() >= (uint64_t) lo)
                              : v->get<int64_t>() >= lo && v->get<int64_t>() <= hi;
    if (!in_range) {
        fail(std::string("\"") + key + "\" must be between " + std::to_string(lo) + " and " + std::to_string(hi));
    }
    return v->get<int64_t>();
}

bool get_bool(const json & obj, const char * key, bool def) {
    const json * v = find(obj, key);
    if (v == nullptr) {
        return def;
    }
    if (!v->is_boolean()) {
        fail(std::string("\"") + key + "\" must be true or false");
    }
    return v->get<bool>();
}

std::string get_string(const json & obj, const char * key, const std::string & def) {
    const json * v = find(obj, key);
    if (v == nullptr) {
        return def;
    }
    if (!v->is_string()) {
        fail(std::string("\"") + key + "\" must be a string");
    }
    return v->get<std::string>();
}

void reject_unknown_keys(const json & obj, const std::set<std::string> & known, const char * what) {
    for (auto it = obj.begin(); it != obj.end(); ++it) {
        if (!known.count(it.key())) {
            fail(std::string("unknown ") + what + " key \"" + it.key() + "\"");
        }
    }
}

// ---------------------------------------------------------------------------
// llama.cpp's log: silent unless a handle asks for it, but its last errors are
// kept so that a failed el_open can say *why* llama.cpp refused the model.
// ---------------------------------------------------------------------------

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

void init_backend_once() {
    static std::once_flag once;
    std::call_once(once, [] {
        llama_log_set(log_callback, nullptr);
        common_log_pause(common_log_main());  // common/'s own logger prints from a thread of its own
        llama_backend_init();
    });
}

// ---------------------------------------------------------------------------
// Configuration (el_open)
// ---------------------------------------------------------------------------

struct Config {
    std::string model;
    int32_t     n_ctx         = 4096;
    int32_t     n_batch       = 512;
    int32_t     n_threads     = 0;
    int32_t     n_gpu_layers  = 0;
    uint32_t    seed          = LLAMA_DEFAULT_SEED;
    float       temperature   = 0.8f;
    float       top_p         = 0.95f;
    int32_t     top_k         = 40;
    float       min_p         = 0.05f;
    int32_t     max_tokens    = 512;
    bool        swa_full      = false;
    std::string flash_attn    = "auto";
    int32_t     n_checkpoints = 8;
    int32_t     n_seq         = 1;
    int32_t     state_cache_mib = 256;
    std::string chat_template;
    bool        tool_call_recovery = true;
    bool        log           = false;
};

Config parse_config(const char * config_json) {
    json j = parse_json_arg(config_json, "config");
    if (!j.is_object()) {
        fail("config must be a JSON object");
    }
    reject_unknown_keys(j, {"model", "n_ctx", "n_batch", "n_threads", "n_gpu_layers", "seed", "temperature", "top_p",
                            "top_k", "min_p", "max_tokens", "swa_full", "flash_attn", "n_checkpoints", "n_seq", "state_cache_mib", "chat_template",
                            "tool_call_recovery", "log"}, "config");
    Config c;
    c.model = get_string(j, "model", "");
    if (c.model.empty()) {
        fail("config needs \"model\": the path of a .gguf file");
    }
    c.n_ctx         = (int32_t) get_int(j, "n_ctx", c.n_ctx, 0, 1 << 24);
    c.n_batch       = (int32_t) get_int(j, "n_batch", c.n_batch, 1, 1 << 16);
    c.n_threads     = (int32_t) get_int(j, "n_threads", 0, 0, 1024);
    c.n_gpu_layers  = (int32_t) get_int(j, "n_gpu_layers", c.n_gpu_layers, -1, 100000);
    c.seed          = (uint32_t) get_int(j, "seed", c.seed, 0, UINT32_MAX);
    c.temperature   = (float) get_number(j, "temperature", c.temperature, -1e9, 1e9);
    c.top_p         = (float) get_number(j, "top_p", c.top_p, 0.0, 1.0);
    c.top_k         = (int32_t) get_int(j, "top_k", c.top_k, 0, INT32_MAX);
    c.min_p         = (float) get_number(j, "min_p", c.min_p, 0.0, 1.0);
    c.max_tokens    = (int32_t) get_int(j, "max_tokens", c.max_tokens, 1, INT32_MAX);
    c.swa_full      = get_bool(j, "swa_full", c.swa_full);
    c.flash_attn    = get_string(j, "flash_attn", c.flash_attn);
    if (c.flash_attn != "auto" && c.flash_attn != "on" && c.flash_attn != "off") {
        fail("\"flash_attn\" must be \"auto\", \"on\" or \"off\"");
    }
    c.n_checkpoints = (int32_t) get_int(j, "n_checkpoints", c.n_checkpoints, 0, 1024);
    c.n_seq         = (int32_t) get_int(j, "n_seq", c.n_seq, 1, 64);
    c.state_cache_mib = (int32_t) get_int(j, "state_cache_mib", c.state_cache_mib, 0, 1 << 20);
    c.chat_template = get_string(j, "chat_template", "");
    c.tool_call_recovery = get_bool(j, "tool_call_recovery", c.tool_call_recovery);
    c.log           = get_bool(j, "log", c.log);
    if (c.n_threads == 0) {
        c.n_threads = common_cpu_get_num_math();
    }
    return c;
}

// llama_model_load_from_file only says "failed"; a readable reason for the
// common mistakes is worth a few lines.
void check_model_file(const std::string & path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) {
        fail("model file not found or not readable: " + path);
    }
    char magic[4] = {0, 0, 0, 0};
    f.read(magic, 4);
    if (f.gcount() != 4 || std::memcmp(magic, "GGUF", 4) != 0) {
        fail("not a GGUF model file (bad magic): " + path);
    }
}

// ---------------------------------------------------------------------------
// The prompt cache: which tokens the KV cache holds, and how to reuse them
// ---------------------------------------------------------------------------

// A saved copy of the part of a sequence's memory that cannot be trimmed back
// (the sliding-window cache, a recurrent state), taken after n_tokens tokens.
struct Checkpoint {
    size_t               n_tokens;
    std::vector<uint8_t> data;
};

// How many leading tokens two sequences share.
size_t common_prefix(const std::vector<llama_token> & a, const std::vector<llama_token> & b) {
    return (size_t) (std::mismatch(a.begin(), a.begin() + std::min(a.size(), b.size()), b.begin()).first - a.begin());
}

// How a model's memory can be rolled back to a prefix.
enum class MemoryKind {
    Trimmable,      // dense KV cache (or SWA with a full-size cache): seq_rm is exact
    SlidingWindow,  // SWA cache: seq_rm succeeds but the window may have evicted what we need
    Recurrent,      // recurrent or hybrid: the state cannot be trimmed per token
};

// Test hooks only: reuse without the checks that make it exact.
enum class UnsafeReuse {
    None,
    TrustSeqRm,  // believe llama_memory_seq_rm's return value, as a naive shim does
    Corrupt,     // re-evaluate the reused prefix in reverse order, mirror unchanged
};

class PromptCache {
  public:
    PromptCache(llama_context * ctx, llama_seq_id seq, MemoryKind kind, int32_t n_swa, int32_t max_checkpoints)
        : ctx_(ctx), seq_(seq), kind_(kind), n_swa_(n_swa), max_checkpoints_(max_checkpoints) {}

    // The tokens resident in the KV cache for this sequence, in position order.
    // Appended to only after llama_decode succeeds, so it never claims more than
    // the cache holds; a mismatch would silently corrupt every later position.
    const std::vector<llama_token> & tokens() const { return tokens_; }

    void append(const llama_token * toks, size_t n) { tokens_.insert(tokens_.end(), toks, toks + n); }

    // Forget everything. Removing a whole sequence never fails, so after this the
    // (empty) mirror and the cache agree again whatever state they were in.
    void clear() {
        llama_memory_seq_rm(llama_get_memory(ctx_), seq_, -1, -1);
        tokens_.clear();
        checkpoints_.clear();
    }

    // Make the cache hold the longest prefix of `prompt` it can hold exactly,
    // and return its length. At least one prompt token is always left to
    // evaluate, so that sampling reads logits computed for this prompt and not
    // stale ones from the last call.
    size_t prepare(const std::vector<llama_token> & prompt, UnsafeReuse unsafe = UnsafeReuse::None) {
        const size_t n = std::min(common_prefix(tokens_, prompt), prompt.size() - 1);
        if (n == tokens_.size()) {
            return n;  // the new prompt extends what is cached: nothing to roll back
        }
        if (unsafe == UnsafeReuse::TrustSeqRm) {
            // Test-only: the mistake the checks below exist to prevent, so that the
            // differential test can show its oracle would catch it.
            llama_memory_seq_rm(llama_get_memory(ctx_), seq_, (llama_pos) n, -1);
            keep_prefix(n);
            return n;
        }
        if (kind_ != MemoryKind::Recurrent && trim_to(n)) {
            return n;
        }
        return restore_checkpoint(n);
    }

    bool wants_checkpoints() const { return kind_ != MemoryKind::Trimmable && max_checkpoints_ > 0; }

    llama_seq_id seq() const { return seq_; }

    // Save the rollback-proof part of the memory as it is now (after tokens().size() tokens).
    void save_checkpoint() {
        const size_t n = tokens_.size();
        if (!wants_checkpoints() || n == 0 ||
            (!checkpoints_.empty() && checkpoints_.back().n_tokens == n)) {
            return;
        }
        const size_t size = llama_state_seq_get_size_ext(ctx_, seq_, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
        Checkpoint cp{n, std::vector<uint8_t>(size)};
        if (llama_state_seq_get_data_ext(ctx_, cp.data.data(), size, seq_, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY) != size) {
            return;  // a missing checkpoint only costs speed, never correctness
        }
        while (!checkpoints_.empty() && (int32_t) checkpoints_.size() >= max_checkpoints_) {
            checkpoints_.pop_front();
        }
        checkpoints_.push_back(std::move(cp));
    }

    size_t n_checkpoints() const { return checkpoints_.size(); }

    size_t checkpoint_bytes() const {
        size_t total = 0;
        for (const auto & c : checkpoints_) {
            total += c.data.size();
        }
        return total;
    }

  private:
    // Does the memory really hold positions [0, n) and nothing after? seq_rm
    // returning true is not enough: a sliding-window cache has evicted
    // positions older than its window, and a token at position n attends to
    // the n_swa positions before it. (llama.cpp's server applies the same bound.)
    bool holds_exactly(size_t n) const {
        llama_memory_t mem = llama_get_memory(ctx_);
        const llama_pos pos_max = llama_memory_seq_pos_max(mem, seq_);
        if (pos_max != (llama_pos) n - 1) {
            return false;
        }
        if (kind_ == MemoryKind::SlidingWindow && n > 0) {
            const llama_pos pos_min = llama_memory_seq_pos_min(mem, seq_);
            return pos_min <= std::max<llama_pos>(0, (llama_pos) n - n_swa_);
        }
        return true;
    }

    bool trim_to(size_t n) {
        if (!llama_memory_seq_rm(llama_get_memory(ctx_), seq_, (llama_pos) n, -1) || !holds_exactly(n)) {
            return false;
        }
        keep_prefix(n);
        return true;
    }

    // Roll back to the latest checkpoint at or before n: its saved state replaces
    // what cannot be trimmed, and everything after it is removed. With no usable
    // checkpoint, start from an empty cache.
    size_t restore_checkpoint(size_t n) {
        llama_memory_t mem = llama_get_memory(ctx_);
        while (!checkpoints_.empty()) {
            Checkpoint & cp = checkpoints_.back();
            if (cp.n_tokens > n) {
                checkpoints_.pop_back();  // describes tokens the new prompt does not share
                continue;
            }
            const bool ok =
                llama_state_seq_set_data_ext(ctx_, cp.data.data(), cp.data.size(), seq_,
                                             LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY) == cp.data.size() &&
                llama_memory_seq_rm(mem, seq_, (llama_pos) cp.n_tokens, -1) && holds_exactly(cp.n_tokens);
            if (ok) {
                keep_prefix(cp.n_tokens);
                return cp.n_tokens;
            }
            break;
        }
        clear();
        return 0;
    }

  public:
    // A host-memory copy of the whole sequence: its tokens and its full state.
    struct Saved {
        std::vector<llama_token> tokens;
        std::vector<uint8_t>     data;
        std::string              session;
    };

    bool save(Saved & out) const {
        const size_t size = llama_state_seq_get_size(ctx_, seq_);
        out.data.resize(size);
        if (size == 0 || llama_state_seq_get_data(ctx_, out.data.data(), size, seq_) != size) {
            return false;
        }
        out.tokens = tokens_;
        return true;
    }

    // Replace this sequence by a saved one; on any doubt, leave it empty instead.
    bool load(const Saved & saved) {
        clear();
        if (llama_state_seq_set_data(ctx_, saved.data.data(), saved.data.size(), seq_) != saved.data.size() ||
            !holds_exactly(saved.tokens.size())) {
            clear();
            return false;
        }
        tokens_ = saved.tokens;
        return true;
    }

    // Test-only: claim that the cache holds `toks` (it holds something else).
    void relabel(std::vector<llama_token> toks) { tokens_ = std::move(toks); }

  private:
    void keep_prefix(size_t n) {
        tokens_.resize(n);
        while (!checkpoints_.empty() && checkpoints_.back().n_tokens > n) {
            checkpoints_.pop_back();
        }
    }

    llama_context *          ctx_;
    llama_seq_id             seq_;
    MemoryKind               kind_;
    int32_t                  n_swa_;
    int32_t                  max_checkpoints_;
    std::vector<llama_token> tokens_;
    std::deque<Checkpoint>   checkpoints_;  // ascending n_tokens, each a prefix of tokens_
};

// From the moment the cache is touched until the call completes, any way out
// (an error, an exception, a failed or aborted llama_decode) leaves the cache
// cleared and the mirror empty, so the next call can never build on a cache
// the mirror does not describe. Disarmed only on the paths that keep them in step.
class CacheGuard {
  public:
    explicit CacheGuard(PromptCache & cache) : cache_(cache) {}
    ~CacheGuard() {
        if (armed_) {
            cache_.clear();
        }
    }
    void disarm() { armed_ = false; }
    CacheGuard(const CacheGuard &) = delete;
    CacheGuard & operator=(const CacheGuard &) = delete;

  private:
    PromptCache & cache_;
    bool          armed_ = true;
};

// ---------------------------------------------------------------------------
// Tool-call recovery: small models often write the call as JSON in the content
// ---------------------------------------------------------------------------

// Strip one Markdown code fence (``` or ```json) if it is all there is.
bool unfence(std::string & s) {
    auto trim = [](std::string x) {
        const char * ws = " \t\r\n";
        size_t b = x.find_first_not_of(ws);
        if (b == std::string::npos) {
            return std::string();
        }
        return x.substr(b, x.find_last_not_of(ws) - b + 1);
    };
    s = trim(s);
    if (s.rfind("```", 0) != 0) {
        return true;
    }
    if (s.size() < 6 || s.compare(s.size() - 3, 3, "```") != 0) {
        return false;
    }
    size_t nl = s.find('\n');
    if (nl == std::string::npos || nl > s.size() - 3) {
        return false;
    }
    std::string lang = trim(s.substr(3, nl - 3));
    if (!lang.empty() && lang != "json" && lang != "JSON" && lang != "tool_call") {
        return false;
    }
    s = trim(s.substr(nl + 1, s.size() - 3 - nl - 1));
    return s.find("```") == std::string::npos;
}

// {"name": N, "arguments": {...}} (also "parameters", or wrapped in
// {"type": "function", "function": {...}}), N one of the offered tools.
bool as_tool_call(const json & v, const std::set<std::string> & names, common_chat_tool_call & out) {
    if (!v.is_object()) {
        return false;
    }
    const json & fn = v.contains("function") && v["function"].is_object() ? v["function"] : v;
    if (!fn.contains("name") || !fn["name"].is_string() || !names.count(fn["name"].get<std::string>())) {
        return false;
    }
    const char * key = fn.contains("arguments") ? "arguments" : fn.contains("parameters") ? "parameters" : nullptr;
    if (key == nullptr) {
        return false;
    }
    json args = fn[key];
    if (args.is_string()) {
        args = json::parse(args.get<std::string>(), nullptr, false);
    }
    if (!args.is_object()) {
        return false;
    }
    out.name      = fn["name"].get<std::string>();
    out.arguments = dump(args);
    return true;
}

// Split text into consecutive top-level JSON values separated only by whitespace
// or commas (small models often write several calls one per line, or a list
// without its brackets, instead of an array).
bool split_json_values(const std::string & body, std::vector<json> & values) {
    size_t i = 0;
    while (i < body.size()) {
        i = body.find_first_not_of(values.empty() ? " \t\r\n" : " \t\r\n,", i);
        if (i == std::string::npos) {
            break;
        }
        if (body[i] != '{' && body[i] != '[') {
            return false;
        }
        int depth = 0;
        bool in_string = false;
        size_t j = i;
        for (; j < body.size(); j++) {
            const char c = body[j];
            if (in_string) {
                if (c == '\\') {
                    j++;
                } else if (c == '"') {
                    in_string = false;
                }
            } else if (c == '"') {
                in_string = true;
            } else if (c == '{' || c == '[') {
                depth++;
            } else if ((c == '}' || c == ']') && --depth == 0) {
                break;
            }
        }
        if (j >= body.size()) {
            return false;
        }
        json v = json::parse(body.substr(i, j + 1 - i), nullptr, false);
        if (v.is_discarded()) {
            return false;
        }
        values.push_back(std::move(v));
        i = j + 1;
    }
    return !values.empty();
}

// The content is, or holds as its only substance, one call or a list of calls.
// Prose that mentions a tool, or code that calls it, never qualifies.
bool recover_tool_calls(const std::string & content, const std::set<std::string> & names,
                        std::vector<common_chat_tool_call> & out) {
    std::string body = content;
    std::vector<json> values;
    if (names.empty() || !unfence(body) || !split_json_values(body, values)) {
        return false;
    }
    json items = json::array();
    for (json & v : values) {
        if (v.is_array()) {
            for (json & x : v) {
                items.push_back(std::move(x));
            }
        } else {
            items.push_back(std::move(v));
        }
    }
    std::vector<common_chat_tool_call> calls;
    for (const json & item : items) {
        common_chat_tool_call tc;
        if (!as_tool_call(item, names, tc)) {
            return false;
        }
        calls.push_back(std::move(tc));
    }
    if (calls.empty()) {
        return false;
    }
    out = std::move(calls);
    return true;
}

// Could this content still become a recovered call? Used while streaming to
// hold such content back until the end, so that the deltas never show as text
// what the final result returns as a tool call.
bool may_become_tool_call(const std::string & content) {
    size_t b = content.find_first_not_of(" \t\r\n");
    return b == std::string::npos || content[b] == '{' || content[b] == '[' || content.compare(b, 3, "```") == 0 ||
           (content.size() - b < 3 && std::string("```").compare(0, content.size() - b, content, b) == 0);
}

// ---------------------------------------------------------------------------
// A request: messages, tools and options turned into what llama.cpp needs
// ---------------------------------------------------------------------------

enum class ToolChoice { Auto, None, Required, Named };

struct Request {
    common_chat_params           chat;           // rendered prompt, parser, tool grammar
    common_chat_parser_params    parser;
    common_params_sampling       sampling;
    std::vector<llama_token>     prompt;
    std::vector<std::string>     stops;
    std::set<std::string>        tool_names;
    ToolChoice                   tool_choice = ToolChoice::Auto;
    bool                         recover     = true;
    int32_t                      max_tokens  = 0;
    int32_t                      top_logprobs = -1;  // -1: no logprobs
    double                       timeout_ms   = 0;
    bool                         cache_prompt = true;
    std::string                  session;                 // pin the conversation to a slot
    size_t                       last_message_start = 0;  // tokens before the last message (0: unknown)
    double                       ms_template = 0;         // rendering the chat template
    // test hooks (options key "_test", compiled with EL_TEST_HOOKS)
    UnsafeReuse                  unsafe_reuse       = UnsafeReuse::None;
    bool                         fail_after_prefill = false;
    bool                         has_canned_output  = false;  // parse this text instead of sampling
    std::string                  canned_output;
};

// The grammar that forces a tool call: {"name": N, "arguments": <N's schema>},
// one of the offered tools (or only the named one), optionally a list of them.
std::string forced_call_grammar(const json & tools, const std::string & only, bool parallel) {
    json variants = json::array();
    for (const json & t : tools) {
        const json & fn = t["function"];
        const std::string name = fn["name"].get<std::string>();
        if (!only.empty() && name != only) {
            continue;
        }
        json params = fn.contains("parameters") && fn["parameters"].is_object() && !fn["parameters"].empty()
                          ? fn["parameters"]
                          : json{{"type", "object"}};
        variants.push_back(json{{"type", "object"},
                                {"properties", json{{"name", json{{"const", name}}}, {"arguments", params}}},
                                {"required", json::array({"name", "arguments"})},
                                {"additionalProperties", false}});
    }
    json call = variants.size() == 1 ? variants[0] : json{{"anyOf", variants}};
    json schema = parallel ? json{{"anyOf", json::array({call, json{{"type", "array"}, {"items", call}, {"minItems", 1}}})}}
                           : call;
    return json_schema_to_grammar(common_json::parse(dump(schema)));
}

void check_messages(const json & messages) {
    if (!messages.is_array()) {
        fail("messages must be a JSON array");
    }
    if (messages.empty()) {
        fail("messages is empty");
    }
    static const std::set<std::string> roles = {"system", "developer", "user", "assistant", "tool"};
    for (size_t i = 0; i < messages.size(); i++) {
        const json & m = messages[i];
        const std::string where = "messages[" + std::to_string(i) + "]";
        if (!m.is_object()) {
            fail(where + " must be an object");
        }
        if (!m.contains("role") || !m["role"].is_string()) {
            fail(where + " needs a string \"role\"");
        }
        const std::string role = m["role"].get<std::string>();
        if (!roles.count(role)) {
            fail(where + " has unknown role \"" + role + "\" (expected system, developer, user, assistant or tool)");
        }
        const json * content = find(m, "content");
        if (content != nullptr && !content->is_string() && !content->is_array()) {
            fail(where + ".content must be a string, an array of parts or null");
        }
        if (content != nullptr && content->is_array()) {
            for (const json & part : *content) {
                if (!part.is_object() || get_string(part, "type", "") != "text" || !part.contains("text") ||
                    !part["text"].is_string()) {
                    fail(where + ".content parts must be {\"type\": \"text\", \"text\": string}");
                }
            }
        }
        const json * calls = find(m, "tool_calls");
        if (calls != nullptr) {
            if (role != "assistant" || !calls->is_array()) {
                fail(where + ".tool_calls must be an array on an assistant message");
            }
            for (const json & c : *calls) {
                if (!c.is_object() || !c.contains("function") || !c["function"].is_object() ||
                    !c["function"].contains("name") || !c["function"]["name"].is_string() ||
                    !c["function"].contains("arguments")) {
                    fail(where + ".tool_calls entries must be {\"type\": \"function\", \"function\": {\"name\", \"arguments\"}}");
                }
            }
        } else if (content == nullptr) {
            fail(where + " needs \"content\"");
        }
    }
}

// OpenAI allows "type" to be omitted on tool calls in history; common/ does not.
json normalize_messages(json messages) {
    for (json & m : messages) {
        if (m.contains("tool_calls") && m["tool_calls"].is_array()) {
            for (json & c : m["tool_calls"]) {
                if (!c.contains("type")) {
                    c["type"] = "function";
                }
            }
            if (!m.contains("content")) {
                m["content"] = nullptr;
            }
        }
    }
    return messages;
}

void check_tools(const json & tools) {
    if (!tools.is_array()) {
        fail("tools must be a JSON array");
    }
    std::set<std::string> seen;
    for (size_t i = 0; i < tools.size(); i++) {
        const json & t = tools[i];
        const std::string where = "tools[" + std::to_string(i) + "]";
        if (!t.is_object() || get_string(t, "type", "function") != "function" || !t.contains("function") ||
            !t["function"].is_object()) {
            fail(where + " must be {\"type\": \"function\", \"function\": {...}}");
        }
        const json & fn = t["function"];
        const std::string name = get_string(fn, "name", "");
        if (name.empty()) {
            fail(where + ".function needs a non-empty \"name\"");
        }
        if (!seen.insert(name).second) {
            fail(where + ": duplicate tool name \"" + name + "\"");
        }
        const json * params = find(fn, "parameters");
        if (params != nullptr && !params->is_object()) {
            fail(where + ".function.parameters must be a JSON schema object");
        }
        get_string(fn, "description", "");
    }
}

}  // namespace

// ---------------------------------------------------------------------------
// The engine behind one handle
// ---------------------------------------------------------------------------

struct el_engine {
    Config                    cfg;
    llama_model *             model = nullptr;
    llama_context *           ctx   = nullptr;
    const llama_vocab *       vocab = nullptr;
    common_chat_templates_ptr templates;
    // One conversation slot per llama.cpp sequence, each with its own mirror and
    // checkpoints. `cache` is the slot serving the current call.
    struct Slot {
        std::unique_ptr<PromptCache> cache;
        std::string                  session;    // pinned by the "session" option, if any
        uint64_t                     last_used = 0;
    };
    std::vector<Slot>         slots;
    PromptCache *             cache = nullptr;
    uint64_t                  clock_ = 0;
    // Conversations evicted from their slot, most recent first, bounded by state_cache_mib.
    std::deque<PromptCache::Saved> host_cache;
    size_t                    host_bytes = 0;
    bool                      restored_from_host = false;  // for the current call
    int32_t                   n_ctx = 0;
    llama_batch               batch{};       // n_batch tokens, reused by every evaluate()
    std::mt19937_64           rng{std::random_device{}()};

    std::mutex                mu;            // serializes calls on this handle
    std::atomic<bool>         cancel{false}; // set by el_cancel / el_close, read by the abort callback
    std::atomic<int64_t>      deadline_ns{0};

    // Set when the backend fails fatally (a lost GPU, a failed compute): every later
    // call on the handle is refused, since nothing it computes could be trusted.
    std::string dead_reason;
    bool        simulate_device_loss = false;  // test hook: llama_decode reports a fatal backend error

    ~el_engine() {
        if (!dead_reason.empty()) {
            // Freeing the context and model would call into the failed backend. Release
            // what lives in host memory and leave the rest: a bounded leak, not a crash.
            slots.clear();  // checkpoints are host buffers; the cache itself is not touched
            templates.reset();
            if (batch.token != nullptr) {
                llama_batch_free(batch);
            }
            return;
        }
        for (Slot & slot : slots) {
            slot.cache->clear();
        }
        slots.clear();
        templates.reset();
        if (batch.token != nullptr) {
            llama_batch_free(batch);
        }
        if (ctx != nullptr) {
            llama_free(ctx);
        }
        if (model != nullptr) {
            llama_model_free(model);
        }
    }

    // llama_decode: 0 ok, 1 no KV slot, 2 aborted, -1 invalid batch, < -1 fatal.
    [[noreturn]] void decode_failed(int32_t rc, const char * where) {
        if (rc < -1) {
            dead_reason = "the backend failed while " + std::string(where) + " (llama_decode status " +
                          std::to_string(rc) + "); the device may be lost. This handle is dead: close it and open a new one";
            throw std::runtime_error(dead_reason);
        }
        fail("llama_decode failed while " + std::string(where) + " (status " + std::to_string(rc) + ")");
    }

    bool should_stop() const {
        if (cancel.load(std::memory_order_relaxed)) {
            return true;
        }
        int64_t d = deadline_ns.load(std::memory_order_relaxed);
        return d != 0 && std::chrono::steady_clock::now().time_since_epoch().count() > d;
    }

    static bool abort_callback(void * data) { return static_cast<el_engine *>(data)->should_stop(); }

    void open(const char * config_json) {
        cfg = parse_config(config_json);
        init_backend_once();
        if (cfg.log) {
            g_log_to_stderr = true;
        }
        check_model_file(cfg.model);

        llama_model_params mp = llama_model_default_params();
        mp.n_gpu_layers = cfg.n_gpu_layers;
        t_log_errors.clear();
        model = llama_model_load_from_file(cfg.model.c_str(), mp);
        if (model == nullptr) {
            fail("llama.cpp could not load the model " + cfg.model + (t_log_errors.empty() ? "" : ": " + t_log_errors));
        }
        vocab = llama_model_get_vocab(model);

        llama_context_params cp = llama_context_default_params();
        // Each slot gets a context of its own n_ctx tokens.
        cp.n_ctx           = (uint32_t) cfg.n_ctx * (uint32_t) cfg.n_seq;
        cp.kv_unified      = false;
        cp.n_batch         = (uint32_t) cfg.n_batch;
        cp.n_ubatch        = (uint32_t) std::min(cfg.n_batch, 512);
        cp.n_seq_max       = (uint32_t) cfg.n_seq;
        cp.n_threads       = cfg.n_threads;
        cp.n_threads_batch = cfg.n_threads;
        cp.swa_full        = cfg.swa_full;
        // No setting is fastest everywhere: measured on 2 CPU cores at 2k tokens of context,
        // flash attention decodes 23 % slower on qwen2.5-0.5b and 20 % faster on gemma-3-270m.
        cp.flash_attn_type = cfg.flash_attn == "on"  ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                           : cfg.flash_attn == "off" ? LLAMA_FLASH_ATTN_TYPE_DISABLED
                                                     : LLAMA_FLASH_ATTN_TYPE_AUTO;
        cp.no_perf         = true;
        cp.abort_callback      = abort_callback;
        cp.abort_callback_data = this;
        ctx = llama_init_from_model(model, cp);
        if (ctx == nullptr) {
            fail("llama.cpp could not create a context (n_ctx " + std::to_string(cfg.n_ctx) +
                 "; out of memory?)" + (t_log_errors.empty() ? "" : ": " + t_log_errors));
        }
        n_ctx = (int32_t) llama_n_ctx_seq(ctx);
        batch = llama_batch_init(cfg.n_batch, 0, 1);

        try {
            templates = common_chat_templates_init(model, cfg.chat_template);
        } catch (const std::exception & e) {
            fail(std::string("chat template does not parse: ") + e.what());
        }

        const int32_t n_swa = llama_model_n_swa(model);
        MemoryKind kind = MemoryKind::Trimmable;
        if (llama_model_is_recurrent(model) || llama_model_is_hybrid(model)) {
            kind = MemoryKind::Recurrent;
        } else if (n_swa > 0 && !cfg.swa_full) {
            kind = MemoryKind::SlidingWindow;
        }
        for (int32_t i = 0; i < cfg.n_seq; i++) {
            slots.push_back(Slot{std::make_unique<PromptCache>(ctx, i, kind, n_swa, cfg.n_checkpoints), "", 0});
        }
        cache = slots[0].cache.get();
    }

    std::string new_call_id() {
        static const char alphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        std::string id = "call_";
        for (int i = 0; i < 24; i++) {
            id += alphabet[rng() % (sizeof(alphabet) - 1)];
        }
        return id;
    }

    Request parse_request(const char * messages_json, const char * tools_json, const char * options_json) {
        Request r;
        json messages = parse_json_arg(messages_json, "messages");
        check_messages(messages);
        json tools = tools_json == nullptr ? json::array() : parse_json_arg(tools_json, "tools");
        if (tools.is_null()) {
            tools = json::array();
        }
        check_tools(tools);
        json opt = options_json == nullptr ? json::object() : parse_json_arg(options_json, "options");
        if (opt.is_null()) {
            opt = json::object();
        }
        if (!opt.is_object()) {
            fail("options must be a JSON object");
        }
        reject_unknown_keys(opt, {"max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop",
                                  "tool_choice", "parallel_tool_calls", "response_format", "logprobs",
                                  "top_logprobs", "logit_bias", "ignore_eos", "tool_call_recovery",
                                  "timeout_ms", "cache_prompt", "session", "_test"}, "options");
        r.session = get_string(opt, "session", "");
        r.cache_prompt = get_bool(opt, "cache_prompt", true);
        int32_t max_top_logprobs = 20;
        if (const json * t = find(opt, "_test")) {
#ifdef EL_TEST_HOOKS
            if (!t->is_object()) {
                fail("\"_test\" must be an object");
            }
            reject_unknown_keys(*t, {"top_logprobs", "reuse", "fail_after_prefill", "output", "device_lost"}, "_test");
            simulate_device_loss = get_bool(*t, "device_lost", false);
            if (find(*t, "output") != nullptr) {
                r.canned_output = get_string(*t, "output", "");
                r.has_canned_output = true;
            }
            max_top_logprobs = llama_vocab_n_tokens(vocab);
            const std::string reuse = get_string(*t, "reuse", "checked");
            r.unsafe_reuse = reuse == "trust_seq_rm" ? UnsafeReuse::TrustSeqRm
                           : reuse == "corrupt"      ? UnsafeReuse::Corrupt
                                                     : UnsafeReuse::None;
            r.fail_after_prefill = get_bool(*t, "fail_after_prefill", false);
#else
            (void) t;
            fail("\"_test\" hooks are not compiled into this library");
#endif
        }

        // Sampling
        common_params_sampling & s = r.sampling;
        s.temp  = (float) get_number(opt, "temperature", cfg.temperature, -1e9, 1e9);
        s.top_p = (float) get_number(opt, "top_p", cfg.top_p, 0.0, 1.0);
        s.top_k = (int32_t) get_int(opt, "top_k", cfg.top_k, 0, INT32_MAX);
        s.min_p = (float) get_number(opt, "min_p", cfg.min_p, 0.0, 1.0);
        s.seed  = (uint32_t) get_int(opt, "seed", cfg.seed, 0, UINT32_MAX);
        s.no_perf = true;
        r.max_tokens = (int32_t) get_int(opt, "max_tokens", cfg.max_tokens, 1, INT32_MAX);
        r.timeout_ms = get_number(opt, "timeout_ms", 0, 0, 1e12);
        r.recover    = get_bool(opt, "tool_call_recovery", cfg.tool_call_recovery);

        if (get_bool(opt, "logprobs", false)) {
            r.top_logprobs = (int32_t) get_int(opt, "top_logprobs", 0, 0, 20);
            if (const json * t = find(opt, "_test")) {
                r.top_logprobs = (int32_t) get_int(*t, "top_logprobs", r.top_logprobs, 0, max_top_logprobs);
            }
        } else if (find(opt, "top_logprobs") != nullptr) {
            fail("\"top_logprobs\" needs \"logprobs\": true");
        }
        if (const json * bias = find(opt, "logit_bias")) {
            if (!bias->is_object()) {
                fail("\"logit_bias\" must be an object {\"<token id>\": bias}");
            }
            const int32_t n_vocab = llama_vocab_n_tokens(vocab);
            for (auto it = bias->begin(); it != bias->end(); ++it) {
                char * end = nullptr;
                long id = std::strtol(it.key().c_str(), &end, 10);
                if (it.key().empty() || *end != '\0' || id < 0 || id >= n_vocab) {
                    fail("\"logit_bias\" key \"" + it.key() + "\" is not a token id of this model (0.." +
                         std::to_string(n_vocab - 1) + ")");
                }
                if (!it.value().is_number() || !std::isfinite(it.value().get<double>())) {
                    fail("\"logit_bias\" values must be finite numbers");
                }
                s.logit_bias.push_back({(llama_token) id, std::clamp(it.value().get<float>(), -100.0f, 100.0f)});
            }
        }
        if (get_bool(opt, "ignore_eos", false)) {
            // Generate until max_tokens (benchmarks): no end-of-generation token can be sampled.
            for (llama_token t = 0; t < llama_vocab_n_tokens(vocab); t++) {
                if (llama_vocab_is_eog(vocab, t)) {
                    s.logit_bias.push_back({t, -INFINITY});
                }
            }
        }
        if (const json * stop = find(opt, "stop")) {
            for (const json & x : stop->is_array() ? *stop : json::array({*stop})) {
                if (!x.is_string()) {
                    fail("\"stop\" must be a string or an array of strings");
                }
                if (!x.get<std::string>().empty()) {
                    r.stops.push_back(x.get<std::string>());
                }
            }
        }

        // Tool choice
        std::string named;
        if (const json * tc = find(opt, "tool_choice")) {
            if (tc->is_string()) {
                const std::string v = tc->get<std::string>();
                if (v == "auto") {
                    r.tool_choice = ToolChoice::Auto;
                } else if (v == "none") {
                    r.tool_choice = ToolChoice::None;
                } else if (v == "required") {
                    r.tool_choice = ToolChoice::Required;
                } else {
                    fail("\"tool_choice\" must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
                }
            } else if (tc->is_object() && tc->contains("function") && (*tc)["function"].is_object()) {
                named = get_string((*tc)["function"], "name", "");
                r.tool_choice = ToolChoice::Named;
            } else {
                fail("\"tool_choice\" must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
            }
        }
        for (const json & t : tools) {
            r.tool_names.insert(t["function"]["name"].get<std::string>());
        }
        if ((r.tool_choice == ToolChoice::Required || r.tool_choice == ToolChoice::Named) && tools.empty()) {
            fail("\"tool_choice\" asks for a tool call but no tools were given");
        }
        if (r.tool_choice == ToolChoice::Named && !r.tool_names.count(named)) {
            fail("\"tool_choice\" names \"" + named + "\", which is not among the tools");
        }
        const bool parallel = get_bool(opt, "parallel_tool_calls", true);
        const bool forced = r.tool_choice == ToolChoice::Required || r.tool_choice == ToolChoice::Named;
        const bool tools_active = !tools.empty() && r.tool_choice != ToolChoice::None;

        // Response format
        json schema;
        if (const json * rf = find(opt, "response_format")) {
            const std::string type = rf->is_object() ? get_string(*rf, "type", "") : "";
            if (type == "json_object") {
                schema = rf->contains("schema") ? (*rf)["schema"] : json{{"type", "object"}};
            } else if (type == "json_schema") {
                const json * js = find(*rf, "json_schema");
                if (js == nullptr || !js->is_object() || !js->contains("schema")) {
                    fail("\"response_format\" json_schema needs {\"json_schema\": {\"schema\": {...}}}");
                }
                schema = (*js)["schema"];
            } else if (type != "text") {
                fail("\"response_format\" must be {\"type\": \"text\" | \"json_object\" | \"json_schema\"}");
            }
            if (!schema.is_null() && !schema.is_object()) {
                fail("\"response_format\" schema must be a JSON object");
            }
            if (!schema.is_null() && tools_active) {
                fail("\"response_format\" cannot be combined with tools unless \"tool_choice\" is \"none\"");
            }
        }

        // Render the prompt with the model's own template
        common_chat_templates_inputs in;
        try {
            in.messages = common_chat_msgs_parse_oaicompat(common_json::parse(dump(normalize_messages(messages))));
            in.tools    = common_chat_tools_parse_oaicompat(common_json::parse(dump(tools)));
        } catch (const std::exception & e) {
            fail(e.what());
        }
        in.tool_choice         = r.tool_choice == ToolChoice::None ? COMMON_CHAT_TOOL_CHOICE_NONE : COMMON_CHAT_TOOL_CHOICE_AUTO;
        in.parallel_tool_calls = parallel;
        in.reasoning_format    = COMMON_REASONING_FORMAT_AUTO;
        in.add_bos             = llama_vocab_get_add_bos(vocab);
        in.add_eos             = llama_vocab_get_add_eos(vocab);
        if (in.messages.back().role == "assistant") {
            // Continue a partial assistant message rather than open a new one.
            in.add_generation_prompt  = false;
            in.continue_final_message = COMMON_CHAT_CONTINUATION_AUTO;
        }
        const auto t_template = std::chrono::steady_clock::now();
        try {
            r.chat = common_chat_templates_apply(templates.get(), in);
        } catch (const std::exception & e) {
            fail(std::string("chat template failed: ") + e.what());
        }
        r.ms_template = ms_since(t_template);

        r.parser = common_chat_parser_params(r.chat);
        r.parser.reasoning_format = COMMON_REASONING_FORMAT_AUTO;
        r.parser.parse_tool_calls = tools_active;
        r.parser.is_continuation  = in.continue_final_message != COMMON_CHAT_CONTINUATION_NONE;
        if (!r.chat.parser.empty()) {
            r.parser.parser.load(r.chat.parser);
        }
        for (const auto & stop : r.chat.additional_stops) {
            r.stops.push_back(stop);
        }

        // Grammar: ours where the output must be valid by construction, else the
        // template's (lazy) tool-call grammar, exactly as llama-server applies it.
        try {
            if (forced) {
                s.grammar = common_grammar(COMMON_GRAMMAR_TYPE_USER, forced_call_grammar(tools, named, parallel));
            } else if (!schema.is_null()) {
                s.grammar = common_grammar(COMMON_GRAMMAR_TYPE_USER, json_schema_to_grammar(common_json::parse(dump(schema))));
            } else if (tools_active && !r.chat.grammar.empty()) {
                s.grammar           = common_grammar(COMMON_GRAMMAR_TYPE_TOOL_CALLS, r.chat.grammar);
                s.grammar_lazy      = r.chat.grammar_lazy;
                s.generation_prompt = r.chat.generation_prompt;
                for (const auto & t : r.chat.preserved_tokens) {
                    auto ids = common_tokenize(vocab, t, false, true);
                    if (ids.size() == 1) {
                        s.preserved_tokens.insert(ids[0]);
                    }
                }
                for (const auto & trig : r.chat.grammar_triggers) {
                    auto ids = trig.type == COMMON_GRAMMAR_TRIGGER_TYPE_WORD ? common_tokenize(vocab, trig.value, false, true)
                                                                             : std::vector<llama_token>{};
                    if (ids.size() == 1 && s.preserved_tokens.count(ids[0])) {
                        s.grammar_triggers.push_back({COMMON_GRAMMAR_TRIGGER_TYPE_TOKEN, trig.value, ids[0]});
                    } else {
                        s.grammar_triggers.push_back(trig);
                    }
                }
            }
        } catch (const UserError &) {
            throw;
        } catch (const std::exception & e) {
            fail(std::string("schema cannot be turned into a grammar: ") + e.what());
        }

        // Forced calls are written as JSON by construction; recovery is how they are read.
        r.recover = forced || (r.recover && tools_active);

        r.prompt = tokenize_prompt(r.chat.prompt);
        if (r.prompt.empty()) {
            fail("the rendered prompt is empty");
        }
        if (cache->wants_checkpoints() && in.messages.size() > 1) {
            r.last_message_start = history_length(in, r.prompt);
        }
        if ((int32_t) r.prompt.size() >= n_ctx) {
            fail("prompt is " + std::to_string(r.prompt.size()) + " tokens; the context holds " +
                 std::to_string(n_ctx) + " (raise n_ctx in the config or shorten the conversation)");
        }
        return r;
    }

    // Which slot serves this call: the one pinned to its session; else the slot whose
    // cached tokens share the longest prefix with the prompt, counting only slots the
    // prompt shares at least half of (ties: the most recently used); else a slot to
    // evict (see below).
    // Deterministic: the same history of calls always picks the same slots.
    size_t pick_slot(const Request & req) {
        size_t chosen = slots.size();
        if (!req.session.empty()) {
            for (size_t i = 0; i < slots.size(); i++) {
                if (slots[i].session == req.session) {
                    chosen = i;
                }
            }
        }
        if (chosen == slots.size() && req.session.empty()) {
            size_t best = 0;
            for (size_t i = 0; i < slots.size(); i++) {
                const auto & toks = slots[i].cache->tokens();
                const size_t n = common_prefix(toks, req.prompt);
                // A prefix counts only if it is at least half of what the slot holds: a
                // few shared template tokens must not cost another conversation its slot.
                if (2 * n < toks.size()) {
                    continue;
                }
                if (n > best || (n == best && n > 0 && slots[i].last_used > slots[chosen].last_used)) {
                    best   = n;
                    chosen = i;
                }
            }
        }
        if (chosen == slots.size()) {
            // Evict in this order: an empty slot, then the least recently used slot no
            // session is pinned to, then the least recently used pinned one.
            auto rank = [&](const Slot & x) {
                return std::make_tuple(!x.session.empty(), !x.cache->tokens().empty(), x.last_used);
            };
            chosen = 0;
            for (size_t i = 1; i < slots.size(); i++) {
                if (rank(slots[i]) < rank(slots[chosen])) {
                    chosen = i;
                }
            }
            Slot & victim = slots[chosen];
            stash(victim);
            if (!victim.session.empty() && victim.session != req.session) {
                victim.session.clear();  // that session lost its slot; its state may wait in host memory
            }
            if (!req.session.empty()) {
                victim.session = req.session;
            }
            unstash(victim, req);
        }
        slots[chosen].last_used = ++clock_;
        return chosen;
    }

    // Keep an evicted conversation in host memory (llama-server does the same), so that
    // when it comes back its prefix is restored instead of evaluated again.
    void stash(const Slot & victim) {
        const size_t limit = (size_t) cfg.state_cache_mib << 20;
        if (limit == 0 || victim.cache->tokens().empty()) {
            return;
        }
        PromptCache::Saved saved;
        saved.session = victim.session;
        if (!victim.cache->save(saved) || saved.data.size() > limit) {
            return;
        }
        host_bytes += saved.data.size();
        host_cache.push_front(std::move(saved));
        while (host_bytes > limit) {
            host_bytes -= host_cache.back().data.size();
            host_cache.pop_back();
        }
    }

    // Restore the saved conversation that shares the longest prefix with the prompt (by
    // the same rule as slot routing, and for a session only its own), if any.
    void unstash(Slot & slot, const Request & req) {
        auto best = host_cache.end();
        size_t best_n = 0;
        for (auto it = host_cache.begin(); it != host_cache.end(); ++it) {
            if (it->session != req.session) {
                continue;
            }
            const size_t n = common_prefix(it->tokens, req.prompt);
            if (n > best_n && 2 * n >= it->tokens.size()) {
                best_n = n;
                best   = it;
            }
        }
        if (best == host_cache.end()) {
            return;  // the slot keeps its tokens: prepare() still reuses any prefix they share
        }
        restored_from_host = slot.cache->load(*best);
        host_bytes -= best->data.size();
        host_cache.erase(best);
    }

    void drop_host_cache(const char * session) {
        for (auto it = host_cache.begin(); it != host_cache.end();) {
            if (session == nullptr || it->session == session) {
                host_bytes -= it->data.size();
                it = host_cache.erase(it);
            } else {
                ++it;
            }
        }
    }

    std::vector<llama_token> tokenize_prompt(const std::string & text) const {
        std::vector<llama_token> toks = common_tokenize(vocab, text, /*add_special=*/true, /*parse_special=*/true);
        const llama_token bos = llama_vocab_bos(vocab);
        if (toks.size() >= 2 && toks[0] == bos && toks[1] == bos) {
            toks.erase(toks.begin());  // the template wrote a BOS and the tokenizer added one
        }
        return toks;
    }

    // How many leading tokens of `prompt` render every message but the last: the
    // template applied to the history alone, tokenized, matched against the prompt.
    size_t history_length(common_chat_templates_inputs in, const std::vector<llama_token> & prompt) {
        in.messages.pop_back();
        in.add_generation_prompt  = false;
        in.continue_final_message = COMMON_CHAT_CONTINUATION_NONE;
        std::vector<llama_token> history;
        try {
            history = tokenize_prompt(common_chat_templates_apply(templates.get(), in).prompt);
        } catch (const std::exception &) {
            return 0;  // some templates refuse a history that ends oddly; only a checkpoint is lost
        }
        return common_prefix(history, prompt);
    }

    // Evaluate tokens [from, to) of `toks` on top of the cache. Returns llama_decode's
    // status (0 = ok). Only successfully evaluated batches reach the mirror.
    int32_t evaluate(const std::vector<llama_token> & toks, size_t from, size_t to, bool logits_last,
                     const std::function<void(size_t)> & progress = nullptr) {
        while (from < to) {
            const size_t n = std::min<size_t>(to - from, (size_t) cfg.n_batch);
            const size_t pos0 = cache->tokens().size();
            batch.n_tokens = (int32_t) n;
            for (size_t i = 0; i < n; i++) {
                batch.token[i]     = toks[from + i];
                batch.pos[i]       = (llama_pos) (pos0 + i);
                batch.n_seq_id[i]  = 1;
                batch.seq_id[i][0] = cache->seq();
                batch.logits[i]    = logits_last && from + i == to - 1;
            }
            const int32_t rc = simulate_device_loss ? -3 : llama_decode(ctx, batch);
            if (rc != 0) {
                return rc;
            }
            cache->append(toks.data() + from, n);
            from += n;
            if (progress) {
                progress(from);
            }
        }
        return 0;
    }

    json logprob_entry(const float * logits, llama_token chosen, int32_t top_n) {
        const int32_t n_vocab = llama_vocab_n_tokens(vocab);
        float max_l = -INFINITY;
        for (int32_t i = 0; i < n_vocab; i++) {
            max_l = std::max(max_l, logits[i]);
        }
        double sum = 0;
        for (int32_t i = 0; i < n_vocab; i++) {
            sum += std::exp((double) logits[i] - max_l);
        }
        const double log_z = max_l + std::log(sum);
        auto entry = [&](llama_token t) {
            const std::string piece = common_token_to_piece(vocab, t, true);
            json bytes = json::array();
            for (unsigned char c : piece) {
                bytes.push_back((int) c);
            }
            // "id" is not in OpenAI's shape; it is what logit_bias needs to refer to a token.
            return json{{"token", piece}, {"logprob", (double) logits[t] - log_z}, {"bytes", bytes}, {"id", t}};
        };
        json e = entry(chosen);
        json top = json::array();
        if (top_n > 0) {
            // Partial selection: O(n_vocab), not a sort of the whole vocabulary.
            std::vector<llama_token> ids(n_vocab);
            for (int32_t i = 0; i < n_vocab; i++) {
                ids[i] = i;
            }
            auto by_logit = [&](llama_token a, llama_token b) { return logits[a] > logits[b]; };
            std::nth_element(ids.begin(), ids.begin() + top_n - 1, ids.end(), by_logit);
            std::sort(ids.begin(), ids.begin() + top_n, by_logit);
            for (int32_t i = 0; i < top_n; i++) {
                top.push_back(entry(ids[i]));
            }
        }
        e["top_logprobs"] = top;
        return e;
    }

    std::string run(const char * messages_json, const char * tools_json, const char * options_json,
                    el_stream_cb callback, void * user_data);
};

namespace {

// Where the text of a stop string starts, if it has appeared; else how many
// trailing bytes could still be the start of one and must be held back.
struct StopScan {
    size_t found = std::string::npos;
    size_t hold  = 0;
};

StopScan scan_stops(const std::string & text, const std::vector<std::string> & stops) {
    StopScan r;
    for (const auto & s : stops) {
        size_t at = text.find(s);
        if (at != std::string::npos) {
            r.found = std::min(r.found, at);
        }
        for (size_t k = std::min(s.size() - 1, text.size()); k > r.hold; k--) {
            if (text.compare(text.size() - k, k, s, 0, k) == 0) {
                r.hold = k;
                break;
            }
        }
    }
    return r;
}

// Length of the longest prefix of s that does not end inside a UTF-8 sequence.
size_t utf8_complete_prefix(const std::string & s) {
    size_t n = s.size();
    for (size_t back = 1; back <= 4 && back <= n; back++) {
        unsigned char c = (unsigned char) s[n - back];
        if ((c & 0xC0) == 0x80) {
            continue;  // continuation byte: keep looking for the lead byte
        }
        size_t need = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
        return back < need ? n - back : n;
    }
    return n;
}

json tool_calls_json(const std::vector<common_chat_tool_call> & calls) {
    json arr = json::array();
    for (const auto & c : calls) {
        arr.push_back(json{{"id", c.id}, {"type", "function"}, {"function", json{{"name", c.name}, {"arguments", c.arguments}}}});
    }
    return arr;
}

// Emits OpenAI-style deltas: the difference between what was sent so far and
// the newest parse of the output. Content that may yet turn out to be a
// recovered tool call is held back until the end.
class DeltaStream {
  public:
    DeltaStream(el_stream_cb cb, void * user_data, bool hold_json) : cb_(cb), user_data_(user_data), hold_json_(hold_json) {}

    // Returns false when the callback asked to stop.
    bool update(common_chat_msg msg, bool final) {
        if (cb_ == nullptr) {
            return true;
        }
        if (!final && hold_json_ && sent_.content.empty() && may_become_tool_call(msg.content)) {
            msg.content.clear();
        }
        json delta = json::object();
        if (msg.reasoning_content.size() > sent_.reasoning_content.size() &&
            msg.reasoning_content.compare(0, sent_.reasoning_content.size(), sent_.reasoning_content) == 0) {
            delta["reasoning_content"] = msg.reasoning_content.substr(sent_.reasoning_content.size());
            sent_.reasoning_content    = msg.reasoning_content;
        }
        if (msg.content.size() > sent_.content.size() &&
            msg.content.compare(0, sent_.content.size(), sent_.content) == 0) {
            delta["content"] = msg.content.substr(sent_.content.size());
            sent_.content    = msg.content;
        }
        json calls = json::array();
        for (size_t i = 0; i < msg.tool_calls.size(); i++) {
            const auto & tc = msg.tool_calls[i];
            if (i >= sent_.tool_calls.size()) {
                // The name comes whole with the first delta of a call; the last call
                // of a partial parse may still be growing it, so wait for the end.
                if (tc.name.empty() || (!final && i + 1 == msg.tool_calls.size() && tc.arguments.empty())) {
                    break;
                }
                sent_.tool_calls.push_back(common_chat_tool_call{tc.name, "", tc.id});
                calls.push_back(json{{"index", i}, {"id", tc.id}, {"type", "function"},
                                     {"function", json{{"name", tc.name}, {"arguments", ""}}}});
            }
            auto & s = sent_.tool_calls[i];
            if (tc.arguments.size() > s.arguments.size() && tc.arguments.compare(0, s.arguments.size(), s.arguments) == 0) {
                calls.push_back(json{{"index", i}, {"function", json{{"arguments", tc.arguments.substr(s.arguments.size())}}}});
                s.arguments = tc.arguments;
            }
        }
        if (!calls.empty()) {
            delta["tool_calls"] = calls;
        }
        if (delta.empty()) {
            return true;
        }
        return cb_(dump(delta).c_str(), user_data_) == 0;
    }

    // {"prompt_progress": {"processed", "total"}}: prompt tokens evaluated so far
    // (not counting those reused from the cache). The return value is ignored:
    // stopping mid-prompt is what el_cancel is for.
    void progress(size_t processed, size_t total) {
        if (cb_ != nullptr) {
            cb_(dump(json{{"prompt_progress", {{"processed", processed}, {"total", total}}}}).c_str(), user_data_);
        }
    }

  private:
    el_stream_cb    cb_;
    void *          user_data_;
    bool            hold_json_;
    common_chat_msg sent_;
};

}  // namespace

std::string el_engine::run(const char * messages_json, const char * tools_json, const char * options_json,
                           el_stream_cb callback, void * user_data) {
    using clock = std::chrono::steady_clock;
    const auto t_prepare = clock::now();
    Request req = parse_request(messages_json, tools_json, options_json);
    if (req.timeout_ms > 0) {
        deadline_ns = (clock::now() + std::chrono::microseconds((int64_t) (req.timeout_ms * 1000))).time_since_epoch().count();
    }

    common_sampler_ptr sampler(common_sampler_init(model, req.sampling));
    if (!sampler) {
        fail("could not set up sampling (invalid grammar or parameters)");
    }
    const double ms_prepare = ms_since(t_prepare);

    // --- reuse the cached prefix, evaluate the rest ------------------------
    restored_from_host = false;
    const size_t slot_index = pick_slot(req);
    cache = slots[slot_index].cache.get();
    CacheGuard guard(*cache);
    auto t0 = clock::now();
    if (!req.cache_prompt) {
        cache->clear();
    }
    size_t n_reused = cache->prepare(req.prompt, req.unsafe_reuse);
    if (req.unsafe_reuse == UnsafeReuse::Corrupt && n_reused > 0) {
        std::vector<llama_token> wrong(req.prompt.begin(), req.prompt.begin() + n_reused);
        std::reverse(wrong.begin() + 1, wrong.end());
        cache->clear();
        if (evaluate(wrong, 0, wrong.size(), false) != 0) {
            fail("test hook: could not evaluate the corrupted prefix");
        }
        cache->relabel(std::vector<llama_token>(req.prompt.begin(), req.prompt.begin() + n_reused));
    }
    const double ms_reset = ms_since(t0);

    std::string finish_reason;
    bool truncated = false;
    DeltaStream stream(callback, user_data, req.recover);
    const size_t n_prompt = req.prompt.size();
    // Long prompts report their evaluation, batch by batch, to a streaming caller.
    std::function<void(size_t)> progress;
    if (callback != nullptr && n_prompt - n_reused > (size_t) cfg.n_batch) {
        progress = [&](size_t done) { stream.progress(done - n_reused, n_prompt - n_reused); };
    }
    t0 = clock::now();
    int32_t rc = 0;
    if (cache->wants_checkpoints()) {
        // Where the cache cannot be trimmed, save checkpoints at the two places a
        // later prompt most often diverges: where the last message starts (the same
        // history with a different question) and one token short of the end (the
        // same prompt again, or this prompt plus the reply and more messages).
        size_t at = n_reused;
        for (size_t stop : {req.last_message_start, n_prompt - 1}) {
            if (rc == 0 && stop > at && stop < n_prompt) {
                rc = evaluate(req.prompt, at, stop, false, progress);
                at = stop;
                if (rc == 0) {
                    cache->save_checkpoint();
                }
            }
        }
        if (rc == 0) {
            rc = evaluate(req.prompt, at, n_prompt, true, progress);
        }
    } else {
        rc = evaluate(req.prompt, n_reused, n_prompt, true, progress);
    }
    const double ms_prefill = ms_since(t0);
    if (req.fail_after_prefill) {
        throw std::runtime_error("test hook: failure after prefill");
    }
    if (rc != 0) {
        if (rc == 2 || should_stop()) {
            finish_reason = "cancelled";  // the guard clears the half-evaluated cache
        } else {
            decode_failed(rc, "evaluating the prompt");
        }
    }

    // --- generate -----------------------------------------------------------
    t0 = clock::now();
    std::string text;             // generated bytes, stop strings excluded
    size_t n_decoded = 0;
    json logprobs = json::array();
    const bool stream_parse = callback != nullptr;
    common_chat_msg last_partial;

    if (req.has_canned_output && finish_reason.empty()) {
        text = req.canned_output;  // test hook: exercise parsing and recovery on exact text
        finish_reason = "stop";
    }
    while (finish_reason.empty()) {
        if (should_stop()) {
            finish_reason = "cancelled";
            break;
        }
        const llama_token tok = common_sampler_sample(sampler.get(), ctx, -1);
        common_sampler_accept(sampler.get(), tok, true);
        n_decoded++;
        if (req.top_logprobs >= 0) {
            logprobs.push_back(logprob_entry(llama_get_logits_ith(ctx, -1), tok, req.top_logprobs));
        }
        if (llama_vocab_is_eog(vocab, tok)) {
            finish_reason = "stop";
            break;
        }
        text += common_token_to_piece(ctx, tok, req.sampling.preserved_tokens.count(tok) > 0);

        StopScan stop = scan_stops(text, req.stops);
        if (stop.found != std::string::npos) {
            text.resize(stop.found);
            finish_reason = "stop";
            break;
        }
        if ((int32_t) n_decoded >= req.max_tokens) {
            finish_reason = "length";
            break;
        }
        if ((int32_t) cache->tokens().size() + 1 >= n_ctx) {
            finish_reason = "length";
            truncated = true;
            break;
        }
        if (stream_parse) {
            const std::string visible = text.substr(0, utf8_complete_prefix(text.substr(0, text.size() - stop.hold)));
            try {
                last_partial = common_chat_parse(visible, true, req.parser);
                if (!stream.update(last_partial, false)) {
                    finish_reason = "cancelled";
                    break;
                }
            } catch (const std::exception &) {
                // a prefix the parser cannot read yet; the next token may fix it
            }
        }
        // Feed the sampled token back. Only now does it enter the cache and the mirror.
        const int32_t drc = evaluate(std::vector<llama_token>{tok}, 0, 1, true);
        if (drc != 0) {
            if (drc == 2 || should_stop()) {
                finish_reason = "cancelled";
                break;
            }
            decode_failed(drc, "generating");
        }
    }
    const double ms_decode = ms_since(t0);
    deadline_ns = 0;

    // An aborted llama_decode may have left part of a batch in the cache, which the
    // mirror does not describe: only then is the guard left armed.
    const bool cache_consistent =
        llama_memory_seq_pos_max(llama_get_memory(ctx), cache->seq()) == (llama_pos) cache->tokens().size() - 1;
    if (cache_consistent) {
        guard.disarm();
    }

    // --- parse the output ---------------------------------------------------
    common_chat_msg msg;
    try {
        msg = common_chat_parse(text, false, req.parser);
    } catch (const std::exception &) {
        msg = common_chat_msg();
        msg.content = text;  // unparseable: return it as text rather than lose it
    }
    if (req.recover && msg.tool_calls.empty() && recover_tool_calls(msg.content, req.tool_names, msg.tool_calls)) {
        msg.content.clear();
    }
    for (auto & tc : msg.tool_calls) {
        if (tc.id.empty()) {
            tc.id = new_call_id();
        }
    }
    if (!msg.tool_calls.empty() && finish_reason == "stop") {
        finish_reason = "tool_calls";
    }
    stream.update(msg, true);

    json tool_calls = tool_calls_json(msg.tool_calls);
    json content = msg.content.empty() && !msg.tool_calls.empty() ? json(nullptr) : json(msg.content);
    json reasoning = msg.reasoning_content.empty() ? json(nullptr) : json(msg.reasoning_content);
    json message = {{"role", "assistant"}, {"content", content}};
    if (!msg.tool_calls.empty()) {
        message["tool_calls"] = tool_calls;
    }
    if (!reasoning.is_null()) {
        message["reasoning_content"] = reasoning;
    }
    json out = {
        {"message", message},
        {"content", content},
        {"reasoning_content", reasoning},
        {"tool_calls", tool_calls},
        {"finish_reason", finish_reason},
        {"truncated", truncated},
        {"usage", {{"prompt_tokens", n_prompt}, {"completion_tokens", n_decoded}, {"total_tokens", n_prompt + n_decoded}}},
        {"n_prompt", n_prompt},
        {"n_reused", n_reused},
        {"n_decoded", n_decoded},
        {"ms_prepare", ms_prepare},
        {"ms_template", req.ms_template},
        {"ms_reset", ms_reset},
        {"ms_prefill", ms_prefill},
        {"ms_decode", ms_decode},
        {"slot", slot_index},
        {"restored_from_host", restored_from_host},
        {"abi_version", EL_ABI_VERSION},
    };
    if (req.top_logprobs >= 0) {
        out["logprobs"] = json{{"content", logprobs}};
    }
    return dump(out);
}

// ---------------------------------------------------------------------------
// Handles: opaque tokens looked up in a registry, never dereferenced, so a
// closed or bogus handle is an error rather than undefined behaviour.
// ---------------------------------------------------------------------------

namespace {

std::mutex g_registry_mu;
std::unordered_map<uintptr_t, std::shared_ptr<el_engine>> g_registry;
uintptr_t g_next_handle = 0x1000;  // never reused, never a real address we own
thread_local std::string t_last_error = "{}";

std::shared_ptr<el_engine> lookup(el_handle * h) {
    std::lock_guard<std::mutex> lock(g_registry_mu);
    auto it = g_registry.find(reinterpret_cast<uintptr_t>(h));
    return it == g_registry.end() ? nullptr : it->second;
}

// The one place where exceptions stop: everything below the C ABI may throw.
template <typename F> char * guarded(F && body) {
    std::string out;
    try {
        out = body();
    } catch (const std::bad_alloc &) {
        out = error_json("out of memory");
    } catch (const std::exception & e) {
        out = error_json(e.what());
    } catch (...) {
        out = error_json("unknown internal error");
    }
    char * s = to_c_string(out);
    return s != nullptr ? s : to_c_string("{\"error\":\"out of memory\"}");
}

json cache_stats(const el_engine & e) {
    json slots = json::array();
    size_t tokens = 0, checkpoints = 0, bytes = 0;
    for (size_t i = 0; i < e.slots.size(); i++) {
        const auto & slot = e.slots[i];
        slots.push_back(json{{"slot", i},
                             {"session", slot.session.empty() ? json(nullptr) : json(slot.session)},
                             {"n_tokens", slot.cache->tokens().size()},
                             {"n_checkpoints", slot.cache->n_checkpoints()},
                             {"checkpoint_bytes", slot.cache->checkpoint_bytes()}});
        tokens += slot.cache->tokens().size();
        checkpoints += slot.cache->n_checkpoints();
        bytes += slot.cache->checkpoint_bytes();
    }
    return json{{"n_tokens", tokens}, {"n_checkpoints", checkpoints}, {"checkpoint_bytes", bytes},
                {"n_slots", e.slots.size()}, {"slots", slots},
                {"host_cache", {{"entries", e.host_cache.size()}, {"bytes", e.host_bytes},
                                {"limit_bytes", (size_t) e.cfg.state_cache_mib << 20}}}};
}

char * generate_on(el_handle * handle, const char * messages_json, const char * tools_json, const char * options_json,
                   el_stream_cb callback, void * user_data) {
    return guarded([&]() -> std::string {
        std::shared_ptr<el_engine> e = lookup(handle);
        if (!e) {
            return error_json("invalid or closed handle");
        }
        std::lock_guard<std::mutex> lock(e->mu);
        if (!lookup(handle)) {
            return error_json("invalid or closed handle");  // closed while we waited
        }
        if (!e->dead_reason.empty()) {
            return error_json(e->dead_reason);
        }
        e->cancel = false;
        e->deadline_ns = 0;
        return e->run(messages_json, tools_json, options_json, callback, user_data);
    });
}

}  // namespace

extern "C" {

EL_API const char * el_version(void) { return EL_ABI_VERSION " (llama.cpp " EL_LLAMA_COMMIT ")"; }

EL_API const char * el_last_error(void) { return t_last_error.c_str(); }

EL_API el_handle * el_open(const char * config_json) {
    try {
        auto e = std::make_shared<el_engine>();
        e->open(config_json);
        std::lock_guard<std::mutex> lock(g_registry_mu);
        const uintptr_t id = g_next_handle;
        g_next_handle += 0x10;
        g_registry.emplace(id, std::move(e));
        t_last_error = "{}";
        return reinterpret_cast<el_handle *>(id);
    } catch (const std::bad_alloc &) {
        t_last_error = error_json("out of memory while opening the model");
    } catch (const std::exception & e) {
        t_last_error = error_json(e.what());
    } catch (...) {
        t_last_error = error_json("unknown internal error");
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

EL_API int el_cancel(el_handle * handle) {
    std::shared_ptr<el_engine> e = lookup(handle);
    if (!e) {
        return -1;
    }
    e->cancel = true;
    return 0;
}

EL_API int el_forget(el_handle * handle, const char * session) {
    try {
        std::shared_ptr<el_engine> e = lookup(handle);
        if (!e) {
            return -1;
        }
        std::lock_guard<std::mutex> lock(e->mu);
        if (!e->dead_reason.empty()) {
            return -1;
        }
        for (auto & slot : e->slots) {
            if (session == nullptr || slot.session == session) {
                slot.cache->clear();
                slot.session.clear();
            }
        }
        e->drop_host_cache(session);
        return 0;
    } catch (...) {
        return -1;
    }
}

EL_API int el_reset(el_handle * handle) { return el_forget(handle, nullptr); }

EL_API char * el_stats(el_handle * handle) {
    return guarded([&]() -> std::string {
        std::shared_ptr<el_engine> e = lookup(handle);
        if (!e) {
            return error_json("invalid or closed handle");
        }
        std::lock_guard<std::mutex> lock(e->mu);
        if (!e->dead_reason.empty()) {
            return error_json(e->dead_reason);
        }
        char desc[256];
        llama_model_desc(e->model, desc, sizeof(desc));
        return dump(json{
            {"model", e->cfg.model},
            {"description", desc},
            {"n_ctx", e->n_ctx},
            {"n_threads", e->cfg.n_threads},
            {"n_swa", llama_model_n_swa(e->model)},
            {"swa_full", e->cfg.swa_full},
            {"flash_attn", e->cfg.flash_attn},
            {"recurrent", llama_model_is_recurrent(e->model) || llama_model_is_hybrid(e->model)},
            {"cache", cache_stats(*e)},
            {"abi_version", EL_ABI_VERSION},
        });
    });
}

EL_API int el_close(el_handle * handle) {
    try {
        std::shared_ptr<el_engine> e;
        {
            std::lock_guard<std::mutex> lock(g_registry_mu);
            auto it = g_registry.find(reinterpret_cast<uintptr_t>(handle));
            if (it == g_registry.end()) {
                return -1;
            }
            e = std::move(it->second);
            g_registry.erase(it);
        }
        e->cancel = true;                          // stop a call in progress...
        { std::lock_guard<std::mutex> lock(e->mu); }  // ...and wait for it to return
        return 0;                                   // the last reference frees the engine
    } catch (...) {
        return -1;
    }
}

EL_API void el_free(char * str) { std::free(str); }

}  // extern "C"
