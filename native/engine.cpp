// engine.cpp -- opening a model and running one generate call; see engine.h. The
// evaluation side (llama_decode, its batches, abort and cancel) is in evaluation.cpp.
//
// run() in steps: parse the request (request.cpp) and set up its sampler; pick the
// slot and reuse its cached prefix (slots.cpp, prompt_cache.cpp); prefill the rest,
// saving checkpoints where the cache cannot be trimmed; decode token by token,
// streaming deltas (delta_stream.cpp); read the text back into a message and write
// the result (result.cpp).

#include "engine.h"

#include "backend.h"
#include "common.h"
#include "delta_stream.h"
#include "request.h"
#include "result.h"
#include "sampling.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>

namespace el {

namespace {

using steady = std::chrono::steady_clock;

// The handle's mutex released for a while (for work on the call's own state, and for the
// stream callback); taken again on every way out, exceptions included.
class Unlocked {
  public:
    explicit Unlocked(std::unique_lock<std::mutex> & lock) : lock_(lock) { lock_.unlock(); }
    ~Unlocked() { lock_.lock(); }
    Unlocked(const Unlocked &) = delete;
    Unlocked & operator=(const Unlocked &) = delete;

  private:
    std::unique_lock<std::mutex> & lock_;
};

}  // namespace

// run()'s state: the parsed request, its sampler, the report, and the token chosen from
// the last evaluation's logits (chosen under the handle's mutex, before any later batch
// can overwrite them; used once the call has turned the previous token into text).
struct Engine::Prepared {
    Request                 req;
    Call                    call;
    CallReport              rep;
    common_sampler_ptr      sampler;
    std::vector<uint8_t>    biased;     // greedy: the tokens with a bias
    steady::time_point      t0;
    bool                    have_next = false;  // false: forced-only text ended
    llama_token             next      = 0;
    json                    next_logprob;
};

Engine::~Engine() {
    sched_.reset();  // joins the evaluator thread before anything it used goes
    if (!dead_reason_.empty() && !dead_free_ok_) {
        // Freeing the context and model would call into the failed backend. Release
        // what lives in host memory and leave the rest: a bounded leak, not a crash.
        if (slots_) {
            slots_->release_host_state();
        }
        templates_.reset();
        if (batch_.token != nullptr) {
            llama_batch_free(batch_);
        }
        return;
    }
    if (slots_) {
        slots_->clear_caches();
    }
    slots_.reset();
    templates_.reset();
    if (batch_.token != nullptr) {
        llama_batch_free(batch_);
    }
    if (ctx_ != nullptr) {
        llama_free(ctx_);
    }
    if (model_ != nullptr) {
        llama_model_free(model_);
    }
}

void Engine::open(const char * config_json) {
    cfg_ = parse_config(config_json);
    init_backend_once();
    if (cfg_.log) {
        enable_log_to_stderr();
    }
    check_model_file(cfg_.model);
    load_model();
    create_context();
    if (!rpc_.lost().empty()) {
        fail("lost the connection to the RPC server " + rpc_.lost() + " while loading the model");
    }

    try {
        templates_ = common_chat_templates_init(model_, cfg_.chat_template);
    } catch (const std::exception & e) {
        fail(std::string("chat template does not parse: ") + e.what());
    }

    const int32_t n_swa = llama_model_n_swa(model_);
    MemoryKind kind = MemoryKind::Trimmable;
    if (llama_model_is_recurrent(model_) || llama_model_is_hybrid(model_)) {
        kind = MemoryKind::Recurrent;
    } else if (n_swa > 0 && !cfg_.swa_full) {
        kind = MemoryKind::SlidingWindow;
    }
    slots_ = std::make_unique<Slots>(ctx_, kind, n_swa, cfg_.n_checkpoints, cfg_.n_seq, cfg_.state_cache_mib);
    // One slot: calls run one at a time on their own thread, as before. Several: an
    // evaluator thread batches the calls' decode steps (scheduler.h).
    sched_ = std::make_unique<Scheduler>(mu, (size_t) cfg_.n_seq, (size_t) cfg_.n_batch, cfg_.n_seq > 1,
                                         [this](const std::vector<Scheduler::Participant *> & b) { return run_step(b); });
}

// Load the weights: on the CPU, or split over the remote (RPC) devices and local GPUs
// by n_gpu_layers and tensor_split.
void Engine::load_model() {
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = cfg_.n_gpu_layers;
    // Repacked weights are multiplied by kernels that handle a batch's rows in groups, with
    // the remainder on another path: a token's logits would depend on where its batch began.
    mp.use_extra_bufts = !cfg_.deterministic;
    if (!cfg_.rpc.empty()) {
        rpc_.connect(cfg_.rpc, cfg_.rpc_timeout_ms);
        mp.devices = rpc_.devices();
    }
    if (!cfg_.tensor_split.empty()) {
        const size_t n_dev = rpc_.n_devices();
        if (rpc_.active() && cfg_.tensor_split.size() > n_dev) {
            fail("\"tensor_split\" has " + std::to_string(cfg_.tensor_split.size()) + " entries for " +
                 std::to_string(n_dev) + " devices");
        }
        tensor_split_ = cfg_.tensor_split;
        tensor_split_.resize(llama_max_devices(), 0.0f);
        mp.tensor_split = tensor_split_.data();
    }
    thread_log_errors().clear();
    model_ = llama_model_load_from_file(cfg_.model.c_str(), mp);
    if (model_ == nullptr) {
        const std::string why = rpc_.lost().empty() ? thread_log_errors()
                                                    : "lost the connection to the RPC server " + rpc_.lost();
        fail("llama.cpp could not load the model " + cfg_.model + (why.empty() ? "" : ": " + why));
    }
    vocab_  = llama_model_get_vocab(model_);
    tokens_ = std::make_unique<TokenCache>(vocab_);
}

void Engine::create_context() {
    llama_context_params cp = llama_context_default_params();
    // Each slot gets a context of its own n_ctx tokens; 0 means the model's own context
    // length per slot (llama.cpp would read 0 as "the model's" for all slots together).
    const uint32_t per_slot = cfg_.n_ctx > 0 ? (uint32_t) cfg_.n_ctx : (uint32_t) llama_model_n_ctx_train(model_);
    cp.n_ctx           = per_slot * (uint32_t) cfg_.n_seq;
    cp.kv_unified      = false;
    cp.n_batch         = (uint32_t) cfg_.n_batch;
    cp.n_ubatch        = (uint32_t) std::min(cfg_.n_batch, 512);
    cp.n_seq_max       = (uint32_t) cfg_.n_seq;
    cp.n_threads       = cfg_.n_threads;
    cp.n_threads_batch = cfg_.n_threads;
    cp.swa_full        = cfg_.swa_full;
    // llama.cpp's default, auto, turns flash attention on for CPUs. Its CPU kernel, as patched
    // (native/patches/ggml-cpu-fa-blocked-decode.patch), decodes at depth as fast as attention
    // without it or faster on every catalogue model (2 cores, 4k tokens of context).
    cp.flash_attn_type = cfg_.flash_attn == "on"  ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                       : cfg_.flash_attn == "off" ? LLAMA_FLASH_ATTN_TYPE_DISABLED
                                                  : LLAMA_FLASH_ATTN_TYPE_AUTO;
    cp.no_perf             = true;
    cp.abort_callback      = abort_callback;
    cp.abort_callback_data = this;
    ctx_ = llama_init_from_model(model_, cp);
    if (ctx_ == nullptr) {
        const std::string & why = thread_log_errors();
        fail("llama.cpp could not create a context (n_ctx " + std::to_string(cfg_.n_ctx) + "; out of memory?)" +
             (why.empty() ? "" : ": " + why));
    }
    if (cfg_.deterministic) {
        use_reference_cpu_kernels(ctx_);
        if (!context_uses_flash_attn(ctx_) && !llama_model_is_recurrent(model_)) {
            fail("\"deterministic\" needs flash attention, which llama.cpp cannot use for this model");
        }
    }
    n_ctx_ = (int32_t) llama_n_ctx_seq(ctx_);
    batch_ = llama_batch_init(cfg_.n_batch, 0, 1);
}

// Thread-safe: ids are made on the calls' own threads, also while others decode.
std::string Engine::new_call_id() {
    static const char alphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    thread_local std::mt19937_64 rng{std::random_device{}()};
    std::string id = "call_";
    for (int i = 0; i < 24; i++) {
        id += alphabet[rng() % (sizeof(alphabet) - 1)];
    }
    return id;
}


// The most likely next token after the request's biases, read straight from the logits
// of the last evaluation (the greedy fast path: no candidate array, no sort). `biased`
// marks the tokens that have a bias, so the scan skips them and they compete with their
// biased logit.
llama_token Engine::argmax_token(const Request & req, const std::vector<uint8_t> & biased, int32_t row) const {
    llama_synchronize(ctx_);
    const float * logits = llama_get_logits_ith(ctx_, row);
    const int32_t n_vocab = llama_vocab_n_tokens(vocab_);
    llama_token best = 0;
    float best_logit = -INFINITY;
    for (int32_t i = 0; i < n_vocab; i++) {
        if (logits[i] > best_logit && !biased[i]) {
            best_logit = logits[i];
            best       = i;
        }
    }
    for (const auto & [token, bias] : req.greedy_bias) {
        if (logits[token] + bias > best_logit) {
            best_logit = logits[token] + bias;
            best       = token;
        }
    }
    return best;
}

json Engine::logprob_entry(const float * logits, llama_token chosen, int32_t top_n) const {
    const int32_t n_vocab = llama_vocab_n_tokens(vocab_);
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
        const std::string piece = common_token_to_piece(vocab_, t, true);
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

std::string Engine::run(const char * messages_json, const char * tools_json, const char * options_json,
                        el_stream_cb callback, void * user_data, uint64_t epoch) {
    Prepared p;
    p.t0         = steady::now();
    p.call.epoch = epoch;
    std::unique_lock<std::mutex> lock(mu);
    if (closing) {
        throw std::runtime_error("invalid or closed handle");
    }
    if (!dead_reason_.empty()) {
        throw std::runtime_error(dead_reason_);
    }
    struct Tracked {
        Engine & e;
        Call *   call = nullptr;
        ~Tracked() {
            if (call != nullptr) {
                e.track(call, false);
            }
        }
    } tracked{*this};
    if (std::string early = begin(p, lock, messages_json, tools_json, options_json, tracked.call); !early.empty()) {
        return early;
    }
    DeltaStream stream(callback, user_data, p.req.recover, [] { return new_call_id(); });
    std::string text;
    {
        // Every way out of this block runs with mu held, and releases, in this order: the
        // slot's cache if it was left out of step, the slot (Slots::settle puts back the
        // host-memory copy a failed call restored), the call's place on the handle.
        struct Admitted {
            Scheduler & sched;
            ~Admitted() { sched.leave(); }
        } admitted{*sched_};
        if (!route(p, lock)) {
            p.rep.finish_reason = "cancelled";
            return dump(result_json(ParsedOutput{}, p.rep, p.req.top_logprobs >= 0));
        }
        struct Settle {
            Engine & e;
            size_t   slot;
            bool     ok = false;
            ~Settle() {
                e.slots_->settle(slot, ok);
                e.sched_->notify();  // a call of the same session may wait for this slot
            }
        } settle{*this, p.rep.slot};
        CacheGuard guard(*p.call.cache);
        reuse(p, lock);
        prefill(p, lock, stream, callback != nullptr);
        text = decode(p, lock, stream, callback != nullptr);
        // An aborted llama_decode may have left part of a batch in the cache, which the
        // mirror does not describe: only then (and after a planted corruption) is the guard
        // left armed.
        if (llama_memory_seq_pos_max(llama_get_memory(ctx_), p.call.cache->seq()) ==
                (llama_pos) p.call.cache->tokens().size() - 1 &&
            p.req.corrupt == Corruption::None) {
            guard.disarm();
            settle.ok = true;
        }
    }
    lock.unlock();  // reading the text back touches nothing of the handle

    const ParsedOutput out = parse_output(
        text, p.req, p.rep.finish_reason == "length", [&stream](common_chat_msg & m) { stream.assign_ids(m); },
        [] { return new_call_id(); });
    if (!out.msg.tool_calls.empty() && p.rep.finish_reason == "stop") {
        p.rep.finish_reason = "tool_calls";
    }
    stream.update(out.msg, true);
    return dump(result_json(out, p.rep, p.req.top_logprobs >= 0));
}

// Parse the request and set up its sampler, then wait for a turn on the handle. Returns
// the whole result when the call ends here: a prepare_only test call, or one cancelled
// (or timed out) while it waited; empty once the call was admitted.
std::string Engine::begin(Prepared & p, std::unique_lock<std::mutex> & lock, const char * messages_json,
                          const char * tools_json, const char * options_json, Call *& tracked) {
    p.req = parse_request(ModelView{cfg_, vocab_, templates_.get(), n_ctx_, slots_->cache(0).wants_checkpoints(),
                                    *tokens_, parsers_},
                          messages_json, tools_json, options_json);
    p.call.device_lost = p.req.device_lost;
    p.call.request_id  = p.req.request_id;
    track(&p.call, true);
    tracked = &p.call;
#ifdef EL_TEST_HOOKS
    if (p.req.leak_bytes > 0) {
        // a steady per-call leak, touched so that it is resident: what the soak must catch
        static std::mutex                           leak_mu;  // handles run in parallel
        static std::vector<std::unique_ptr<char[]>> leaked;
        std::lock_guard<std::mutex>                 leak_lock(leak_mu);
        leaked.push_back(std::make_unique<char[]>((size_t) p.req.leak_bytes));
        std::memset(leaked.back().get(), 1, (size_t) p.req.leak_bytes);
    }
#endif
    if (p.req.timeout_ms > 0) {
        p.call.deadline_ns =
            (p.t0 + std::chrono::microseconds((int64_t) (p.req.timeout_ms * 1000))).time_since_epoch().count();
    }
    const auto t_sampler = steady::now();
    p.sampler.reset(common_sampler_init(model_, p.req.sampling));
    if (!p.sampler) {
        fail("could not set up sampling (invalid grammar or parameters)");
    }
    if (p.req.greedy) {
        p.biased.assign(llama_vocab_n_tokens(vocab_), 0);
        for (const auto & b : p.req.greedy_bias) {
            p.biased[b.first] = 1;
        }
    }
    CallReport & rep = p.rep;
    rep.ms_sampler        = ms_since(t_sampler);
    rep.ms_prepare        = ms_since(p.t0);
    rep.ms_template       = p.req.ms_template;
    rep.ms_tokenize       = p.req.tokenizing.ms_tokenize;
    rep.n_tokenize_reused = p.req.tokenizing.n_reused;
    rep.n_prompt          = p.req.prompt.size();
    if (!p.req.prepare_only && !should_stop(p.call)) {
        if (sched_->admit(lock, [&] { return should_stop(p.call); })) {
            return "";
        }
        if (closing) {
            throw std::runtime_error("invalid or closed handle");
        }
    }
    // Cancelled (or timed out) before its turn: it ends before it is given a slot, so
    // nothing on the handle changes. The prepare_only test hook ends here too, to check
    // the request path without evaluating anything.
    rep.finish_reason = p.req.prepare_only ? "prepare_only" : "cancelled";
    json out          = result_json(ParsedOutput{}, rep, p.req.top_logprobs >= 0);
    if (p.req.prepare_only) {
        out["prepared"] = prepared_json(p.req);
    }
    return dump(out);
}

// Give the call its slot (Slots::pick). A session's slot serves one call at a time: a
// second call of the same session waits for it. False if the call stopped first.
bool Engine::route(Prepared & p, std::unique_lock<std::mutex> & lock) {
    for (;;) {
        const size_t slot = slots_->pick(p.req.session, p.req.prompt, p.rep.restored_from_host);
        if (slot != Slots::kBusy) {
            p.rep.slot   = slot;
            p.rep.routed = true;
            p.call.cache = &slots_->cache(slot);
            return true;
        }
        if (should_stop(p.call)) {
            if (closing) {
                throw std::runtime_error("invalid or closed handle");
            }
            return false;
        }
        sched_->wait_a_little(lock);
    }
}

// Make the slot's cache hold the longest prefix of the prompt it can hold exactly.
void Engine::reuse(Prepared & p, std::unique_lock<std::mutex> & lock) {
    const Request & req = p.req;
    PromptCache &   cache = *p.call.cache;
    const auto t0 = steady::now();
    if (!req.cache_prompt) {
        cache.clear();
    }
    const std::vector<llama_token> before = req.corrupt == Corruption::Other ? cache.tokens() : std::vector<llama_token>{};
    p.rep.n_reused = cache.prepare(req.prompt, req.unsafe_reuse);
#ifdef EL_TEST_HOOKS
    if (req.corrupt != Corruption::None) {
        plant_corruption(p, lock, before);
    }
#endif
    if (req.unsafe_reuse == UnsafeReuse::Corrupt && p.rep.n_reused > 0) {
        std::vector<llama_token> wrong(req.prompt.begin(), req.prompt.begin() + p.rep.n_reused);
        std::reverse(wrong.begin() + 1, wrong.end());
        cache.clear();
        if (evaluate(p.call, lock, wrong, 0, wrong.size(), false) != 0) {
            fail("test hook: could not evaluate the corrupted prefix");
        }
        cache.relabel(std::vector<llama_token>(req.prompt.begin(), req.prompt.begin() + p.rep.n_reused));
    }
    p.rep.ms_reset = ms_since(t0);
}

#ifdef EL_TEST_HOOKS
// Test hook "probe": instead of decoding, evaluate a copy of the prompt's first tokens
// after the prompt and report, at every position of the copy, the log probability of the
// token the copy goes on with and the model's top token. A model that has read its
// context predicts a copy of it sharply, so one wrong, missing or extra token in the
// cache shows at the place where the copy reaches it. Both handles of a comparison run
// these batches in the same shapes at the same positions. Runs right after the prompt's
// last batch, on the thread that evaluated it.
void Engine::probe(const Request & req, const Call & call, CallReport & rep) {
    const size_t p = req.prompt.size();
    const size_t n = std::min({(size_t) req.probe, p, (size_t) std::max<int64_t>(0, (int64_t) n_ctx_ - (int64_t) p - 1)});
    const int32_t n_vocab = llama_vocab_n_tokens(vocab_);
    json lp = json::array(), top = json::array();
    auto record = [&](const float * logits, llama_token next) {
        float max_l = -INFINITY;
        int32_t best = 0;
        for (int32_t i = 0; i < n_vocab; i++) {
            if (logits[i] > max_l) {
                max_l = logits[i];
                best  = i;
            }
        }
        double sum = 0;
        for (int32_t i = 0; i < n_vocab; i++) {
            sum += std::exp((double) logits[i] - max_l);
        }
        lp.push_back((double) logits[next] - max_l - std::log(sum));
        top.push_back(best);
    };
    if (n > 0) {
        record(llama_get_logits_ith(ctx_, -1), req.prompt[0]);
    }
    const size_t chunk = std::min<size_t>(32, (size_t) cfg_.n_batch);  // logits for every position: keep batches small
    for (size_t from = 0; from + 1 < n; from += chunk) {
        const size_t m    = std::min(chunk, n - 1 - from);
        const size_t pos0 = call.cache->tokens().size() + call.pos_shift;
        batch_.n_tokens   = (int32_t) m;
        for (size_t i = 0; i < m; i++) {
            batch_.token[i]     = req.prompt[from + i];
            batch_.pos[i]       = (llama_pos) (pos0 + i);
            batch_.n_seq_id[i]  = 1;
            batch_.seq_id[i][0] = call.cache->seq();
            batch_.logits[i]    = true;
        }
        if (const int32_t rc = llama_decode(ctx_, batch_); rc != 0) {
            decode_failed(rc, "probing");
        }
        call.cache->append(req.prompt.data() + from, m);
        for (size_t i = 0; i < m; i++) {
            record(llama_get_logits_ith(ctx_, (int32_t) i), req.prompt[from + i + 1]);
        }
    }
    rep.probe         = json{{"logprob", lp}, {"top", top}};
    rep.finish_reason = "stop";
}

// Test hook: rebuild the slot so that it holds the reused prefix with one realistic
// fault, while the call goes on as if the prefix were intact (prefill starts at
// prompt[n_reused]). Such a cache computes exactly what a fresh evaluation of the
// faulty sequence computes. The guard clears the slot when the call ends.
void Engine::plant_corruption(Prepared & pr, std::unique_lock<std::mutex> & lock, const std::vector<llama_token> & before) {
    const Request & req = pr.req;
    size_t n = pr.rep.n_reused;
    std::vector<llama_token> held(req.prompt.begin(), req.prompt.begin() + (std::ptrdiff_t) n);
    if (req.corrupt == Corruption::Other) {
        // a slot-routing fault: the cache is another conversation's, claimed to be this one's
        n    = std::min(before.size(), req.prompt.size() - 1);
        held = std::vector<llama_token>(before.begin(), before.begin() + (std::ptrdiff_t) n);
        if (n == 0 || common_prefix(held, req.prompt) == n) {
            fail("test hook: the slot held no other conversation to mistake for this one");
        }
    }
    const int64_t at = req.corrupt_at < 0 ? (int64_t) n + req.corrupt_at : req.corrupt_at;
    if (req.corrupt != Corruption::Other && (at < 0 || at >= (int64_t) n)) {
        fail("test hook: \"at\" " + std::to_string(req.corrupt_at) + " is outside the reused prefix of " +
             std::to_string(n) + " tokens");
    }
    if (req.corrupt == Corruption::Stale) {
        // another token of this prompt: the stale word a wrongly kept cell would hold
        auto other = std::find_if(req.prompt.begin() + at, req.prompt.end(), [&](llama_token t) { return t != held[at]; });
        if (other == req.prompt.end()) {
            other = std::find_if(req.prompt.begin(), req.prompt.end(), [&](llama_token t) { return t != held[at]; });
        }
        held[at] = *other;
    } else if (req.corrupt == Corruption::Missing) {
        held.erase(held.begin() + at);
    } else if (req.corrupt == Corruption::Duplicate) {
        held.insert(held.begin() + at, held[at]);
    }
    pr.call.cache->clear();
    if (evaluate(pr.call, lock, held, 0, held.size(), false) != 0) {
        fail("test hook: could not evaluate the corrupted prefix");
    }
    if (req.corrupt == Corruption::Shift) {
        // a hole at `at`: the tokens from there on, and all that follow, one position late
        llama_memory_seq_add(llama_get_memory(ctx_), pr.call.cache->seq(), (llama_pos) at, -1, 1);
        pr.call.pos_shift = 1;
    }
    pr.rep.n_reused = n;
}
#endif

// Evaluate the prompt past what was reused, and choose the first token from its logits.
// A cancel here ends the call as "cancelled" (the guard clears the half-evaluated cache);
// a failed decode throws.
void Engine::prefill(Prepared & p, std::unique_lock<std::mutex> & lock, DeltaStream & stream, bool streaming) {
    const Request & req      = p.req;
    const size_t    n_prompt = req.prompt.size();
    const size_t    n_reused = p.rep.n_reused;
    // Long prompts report their evaluation, batch by batch, to a streaming caller.
    std::function<void(size_t)> progress;
    if (streaming && n_prompt - n_reused > (size_t) cfg_.n_batch) {
        progress = [&](size_t done) { stream.progress(done - n_reused, n_prompt - n_reused); };
    }
    const std::function<void()> first = [&] { first_token(p); };
    const auto t0 = steady::now();
    int32_t rc = 0;
    if (p.call.cache->wants_checkpoints()) {
        // Where the cache cannot be trimmed, save checkpoints at the two places a
        // later prompt most often diverges: where the last message starts (the same
        // history with a different question) and one token short of the end (the
        // same prompt again, or this prompt plus the reply and more messages).
        size_t at = n_reused;
        for (size_t stop : {req.last_message_start, n_prompt - 1}) {
            if (rc == 0 && stop > at && stop < n_prompt) {
                rc = evaluate(p.call, lock, req.prompt, at, stop, false, progress);
                at = stop;
                if (rc == 0) {
                    p.call.cache->save_checkpoint();
                }
            }
        }
        if (rc == 0) {
            rc = evaluate(p.call, lock, req.prompt, at, n_prompt, true, progress, first);
        }
    } else {
        rc = evaluate(p.call, lock, req.prompt, n_reused, n_prompt, true, progress, first);
    }
    p.rep.ms_prefill = ms_since(t0);
    if (req.fail_after_prefill) {
        throw std::runtime_error("test hook: failure after prefill");
    }
    if (rc != 0) {
        if (rc != kRemoteLost && rc != kDead && (rc == 2 || should_stop(p.call))) {
            p.rep.finish_reason = "cancelled";
        } else {
            decode_failed(rc, "evaluating the prompt");
        }
    }
}

// Right after the prompt's last batch: the probe test hook, or the first token.
void Engine::first_token(Prepared & p) {
#ifdef EL_TEST_HOOKS
    if (p.req.probe > 0) {
        probe(p.req, p.call, p.rep);
        return;
    }
#endif
    if (!p.req.has_canned_output) {
        choose_next(p, -1);
    }
}

// The token that follows the last evaluation, from row `row` of its logits (-1: the
// last row): a forced one (test hooks), the argmax, or the sampler's choice.
void Engine::choose_next(Prepared & p, int32_t row) {
    const Request & req = p.req;
    const size_t    n   = p.rep.n_decoded;
    llama_token     tok;
    if (n < req.forced.size()) {
        tok = req.forced[n];
        if (!req.forced_only) {
            common_sampler_accept(p.sampler.get(), tok, true);  // sampling goes on after them
        }
    } else if (req.forced_only) {
        p.have_next = false;  // the forced text ends as if the model ended it
        return;
    } else if (req.greedy) {
        tok = argmax_token(req, p.biased, row);
    } else {
        tok = common_sampler_sample(p.sampler.get(), ctx_, row);
        common_sampler_accept(p.sampler.get(), tok, true);
    }
    p.have_next = true;
    p.next      = tok;
    if (req.top_logprobs >= 0) {
        p.next_logprob = logprob_entry(llama_get_logits_ith(ctx_, row), tok, req.top_logprobs);
    }
}

// Sample until an end token, a stop string, a limit or a cancel; returns the text
// generated (stop strings excluded) and sets the finish reason. Each token is turned into
// text with the handle's mutex released, then evaluated in the next decode step beside
// the other calls' tokens (Scheduler::step).
std::string Engine::decode(Prepared & p, std::unique_lock<std::mutex> & lock, DeltaStream & stream, bool streaming) {
    const auto t0 = steady::now();
    std::string text;
    if (p.req.has_canned_output && p.rep.finish_reason.empty()) {
        text = p.req.canned_output;  // test hook: exercise parsing and recovery on exact text
        p.rep.finish_reason = "stop";
    }
    Decoding d;
    d.call  = &p.call;
    d.seq   = p.call.cache->seq();
    d.after = [&](int32_t row) {
        p.call.cache->append(&d.tok, 1);  // only an evaluated token enters the cache and the mirror
        choose_next(p, row);
    };
    sched_->enter_decode();
    struct Leave {
        Scheduler & sched;
        ~Leave() { sched.leave_decode(); }
    } leave{*sched_};
    while (p.rep.finish_reason.empty()) {
        if (should_stop(p.call)) {
            p.rep.finish_reason = "cancelled";
            break;
        }
        if (!p.have_next) {
            p.rep.finish_reason = "stop";
            break;
        }
        const llama_token tok = p.next;
        p.rep.n_decoded++;
        if (p.req.top_logprobs >= 0) {
            p.rep.logprobs.push_back(std::move(p.next_logprob));
        }
        {
            Unlocked unlocked(lock);
            consume(p, stream, streaming, tok, text);
        }
        if (!p.rep.finish_reason.empty()) {
            break;
        }
        d.tok = tok;
        d.pos = (llama_pos) (p.call.cache->tokens().size() + p.call.pos_shift);
        sched_->step(lock, d);
        p.rep.n_batched_max = std::max(p.rep.n_batched_max, d.step_size);
        if (d.rc != 0) {
            if (d.rc != kRemoteLost && d.rc != kDead && (d.rc == 2 || should_stop(p.call))) {
                p.rep.finish_reason = "cancelled";
                break;
            }
            decode_failed(d.rc, "generating");
        }
    }
    p.rep.ms_decode = ms_since(t0);
    return text;
}

// Turn one generated token into text: end at an end token, a stop string or a limit
// (setting the finish reason), else stream what became visible. Touches only the call's
// own state, so it runs without the handle's mutex.
void Engine::consume(Prepared & p, DeltaStream & stream, bool streaming, llama_token tok, std::string & text) {
    const Request & req = p.req;
    CallReport &    rep = p.rep;
    if (llama_vocab_is_eog(vocab_, tok)) {
        rep.finish_reason = "stop";
        return;
    }
    const size_t scan_from = text.size() + 1 > req.max_stop_len ? text.size() + 1 - req.max_stop_len : 0;
    text += common_token_to_piece(vocab_, tok, req.sampling.preserved_tokens.count(tok) > 0);

    StopScan stop = scan_stops(text, scan_from, req.stops);
    if (stop.found != std::string::npos) {
        text.resize(stop.found);
        rep.finish_reason = "stop";
        return;
    }
    // "_test.force" decodes exactly its tokens and stops there as at a limit;
    // "_test.force_output" ends as if the model ended it (top of the loop).
    const bool forced_done = !req.forced.empty() && !req.forced_only && rep.n_decoded >= req.forced.size();
    if ((int32_t) rep.n_decoded >= req.max_tokens || forced_done) {
        rep.finish_reason = "length";
        return;
    }
    if ((int32_t) p.call.cache->tokens().size() + 1 >= n_ctx_) {
        rep.finish_reason = "length";
        rep.truncated     = true;
        return;
    }
    if (streaming) {
        const std::string visible = text.substr(0, utf8_complete_prefix(text.substr(0, text.size() - stop.hold)));
        try {
            if (!stream.update(common_chat_parse(visible, true, req.parser), false)) {
                rep.finish_reason = "cancelled";
            }
        } catch (const std::exception &) {
            // a prefix the parser cannot read yet; the next token may fix it
        }
    }
}

// The devices layers can be offloaded to: the remote ones and the local GPUs.
json Engine::device_names() const {
    json names = json::array();
    const std::vector<ggml_backend_dev_t> devs =
        rpc_.active() ? std::vector<ggml_backend_dev_t>(rpc_.devices_begin(), rpc_.devices_begin() + rpc_.n_devices())
                      : local_gpus();
    for (ggml_backend_dev_t d : devs) {
        names.push_back(std::string(ggml_backend_dev_name(d)) + " (" + ggml_backend_dev_description(d) + ")");
    }
    return names;
}

json Engine::stats() const {
    char desc[256];
    llama_model_desc(model_, desc, sizeof(desc));
    return json{
        {"model", cfg_.model},
        {"description", desc},
        {"n_ctx", n_ctx_},
        {"n_threads", cfg_.n_threads},
        {"n_swa", llama_model_n_swa(model_)},
        {"swa_full", cfg_.swa_full},
        {"flash_attn", cfg_.flash_attn},
        {"flash_attn_in_use", context_uses_flash_attn(ctx_)},
        {"deterministic", cfg_.deterministic},
        {"recurrent", llama_model_is_recurrent(model_) || llama_model_is_hybrid(model_)},
        {"n_gpu_layers", cfg_.n_gpu_layers},
        {"rpc", rpc_.endpoints()},
        {"devices", device_names()},
        {"cache", slots_->stats()},
        {"evaluation", {{"decode_steps", eval_.steps},
                        {"decode_tokens", eval_.step_tokens},
                        {"ms_decode_steps", eval_.ms_steps},
                        {"prompt_batches", eval_.batches},
                        {"prompt_tokens", eval_.batch_tokens},
                        {"ms_prompt_batches", eval_.ms_batches}}},
        {"abi_version", EL_ABI_VERSION},
    };
}

}  // namespace el
