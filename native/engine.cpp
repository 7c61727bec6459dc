// engine.cpp -- opening a model and running one generate call; see engine.h.
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
#include <stdexcept>

namespace el {

namespace {

using steady = std::chrono::steady_clock;

// evaluate()'s status when a remote server was lost (beside llama_decode's own codes).
constexpr int32_t kRemoteLost = -100;

double ms_since(steady::time_point t0) {
    return std::chrono::duration<double, std::milli>(steady::now() - t0).count();
}

}  // namespace

Engine::~Engine() {
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
    cache_ = &slots_->cache(0);
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
    // No setting is fastest everywhere: measured on 2 CPU cores at 2k tokens of context,
    // flash attention decodes 23 % slower on qwen2.5-0.5b and 20 % faster on gemma-3-270m.
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

// llama_decode: 0 ok, 1 no KV slot, 2 aborted, -1 invalid batch, < -1 fatal.
void Engine::decode_failed(int32_t rc, const char * where) {
    if (rc == kRemoteLost) {
        // The patched ggml-rpc failed the connection without touching anything else, so
        // freeing the context and model at el_close stays safe (remote buffers on the
        // servers still alive are freed too).
        dead_free_ok_ = true;
        dead_reason_ = "lost the RPC server " + rpc_.lost() + " while " + where +
                       (rpc_.interrupted() ? " (no answer " + std::to_string(RpcLink::kGraceMs) +
                                                 " ms after the call's timeout or cancel; the connection was cut)"
                                           : " (it died, or stalled past rpc_timeout_ms)") +
                       ". This handle is dead: close it and open a new one";
        throw std::runtime_error(dead_reason_);
    }
    if (rc < -1) {
        dead_reason_ = "the backend failed while " + std::string(where) + " (llama_decode status " +
                       std::to_string(rc) + "); the device may be lost. This handle is dead: close it and open a new one";
        throw std::runtime_error(dead_reason_);
    }
    fail("llama_decode failed while " + std::string(where) + " (status " + std::to_string(rc) + ")");
}

// After an evaluation on remote devices: wait for its results, then make sure every
// connection survived it; otherwise its output may be zeros and must not be read.
int32_t Engine::check_remote(int32_t rc) {
    if (!rpc_.active()) {
        return rc;
    }
    if (rc == 0) {
        llama_synchronize(ctx_);
    }
    return rpc_.lost().empty() ? rc : kRemoteLost;
}

bool Engine::should_stop() const {
    if (cancel_epoch.load(std::memory_order_relaxed) != call_epoch.load(std::memory_order_relaxed) || closing.load(std::memory_order_relaxed)) {
        return true;
    }
    int64_t d = deadline_ns.load(std::memory_order_relaxed);
    return d != 0 && steady::now().time_since_epoch().count() > d;
}

bool Engine::abort_callback(void * data) { return static_cast<Engine *>(data)->should_stop(); }

std::string Engine::new_call_id() {
    static const char alphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    std::string id = "call_";
    for (int i = 0; i < 24; i++) {
        id += alphabet[rng_() % (sizeof(alphabet) - 1)];
    }
    return id;
}

// Evaluate tokens [from, to) of `toks` on top of the cache. Returns llama_decode's
// status (0 = ok). Only successfully evaluated batches reach the mirror.
int32_t Engine::evaluate(const std::vector<llama_token> & toks, size_t from, size_t to, bool logits_last,
                         const std::function<void(size_t)> & progress) {
    while (from < to) {
        const size_t n = std::min<size_t>(to - from, (size_t) cfg_.n_batch);
        const size_t pos0 = cache_->tokens().size() + test_pos_shift_;
        batch_.n_tokens = (int32_t) n;
        for (size_t i = 0; i < n; i++) {
            batch_.token[i]     = toks[from + i];
            batch_.pos[i]       = (llama_pos) (pos0 + i);
            batch_.n_seq_id[i]  = 1;
            batch_.seq_id[i][0] = cache_->seq();
            batch_.logits[i]    = logits_last && from + i == to - 1;
        }
        const int32_t rc = simulate_device_loss_ ? -3 : check_remote(llama_decode(ctx_, batch_));
        if (rc != 0) {
            return rc;
        }
        cache_->append(toks.data() + from, n);
        from += n;
        if (progress) {
            progress(from);
        }
    }
    return 0;
}

// The most likely next token after the request's biases, read straight from the logits
// of the last evaluation (the greedy fast path: no candidate array, no sort). `biased`
// marks the tokens that have a bias, so the scan skips them and they compete with their
// biased logit.
llama_token Engine::argmax_token(const Request & req, const std::vector<uint8_t> & biased) const {
    llama_synchronize(ctx_);
    const float * logits = llama_get_logits_ith(ctx_, -1);
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
                        el_stream_cb callback, void * user_data) {
    const auto t_prepare = steady::now();
    Request req = parse_request(ModelView{cfg_, vocab_, templates_.get(), n_ctx_, cache_->wants_checkpoints(), *tokens_, parsers_},
                                messages_json, tools_json, options_json);
    simulate_device_loss_ = req.device_lost;
#ifdef EL_TEST_HOOKS
    if (req.leak_bytes > 0) {
        // a steady per-call leak, touched so that it is resident: what the soak must catch
        static std::mutex                          leak_mu;
        static std::vector<std::unique_ptr<char[]>> leaked;
        std::lock_guard<std::mutex>                lock(leak_mu);
        leaked.push_back(std::make_unique<char[]>((size_t) req.leak_bytes));
        std::memset(leaked.back().get(), 1, (size_t) req.leak_bytes);
    }
#endif
    if (req.timeout_ms > 0) {
        deadline_ns = (steady::now() + std::chrono::microseconds((int64_t) (req.timeout_ms * 1000))).time_since_epoch().count();
    }
    RpcCallGuard watch(rpc_, [this] { return should_stop(); });
    const auto         t_sampler = steady::now();
    common_sampler_ptr sampler(common_sampler_init(model_, req.sampling));
    if (!sampler) {
        fail("could not set up sampling (invalid grammar or parameters)");
    }
    CallReport rep;
    rep.ms_sampler  = ms_since(t_sampler);
    rep.ms_prepare  = ms_since(t_prepare);
    rep.ms_template = req.ms_template;
    rep.ms_tokenize = req.tokenizing.ms_tokenize;
    rep.n_tokenize_reused = req.tokenizing.n_reused;
    rep.n_prompt    = req.prompt.size();
    if (should_stop() || req.prepare_only) {
        // Cancelled (or closed) while it waited for the handle: it ends before it is
        // given a slot, so nothing on the handle changes. The prepare_only test hook ends
        // here too, to check the request path without evaluating anything.
        rep.finish_reason = req.prepare_only ? "prepare_only" : "cancelled";
        json out          = result_json(ParsedOutput{}, rep, req.top_logprobs >= 0);
        if (req.prepare_only) {
            out["prepared"] = prepared_json(req);
        }
        return dump(out);
    }
    rep.routed = true;

    rep.slot = slots_->pick(req.session, req.prompt, rep.restored_from_host);
    cache_   = &slots_->cache(rep.slot);
    CacheGuard guard(*cache_);
    // Every way out settles the routing: a call that leaves its slot cleared puts back
    // the host-memory copy it restored (see Slots::settle).
    struct Settle {
        Slots & slots;
        bool    ok = false;
        ~Settle() { slots.settle(ok); }
    } settle{*slots_};
    reuse(req, rep);

    DeltaStream stream(callback, user_data, req.recover, [this] { return new_call_id(); });
    const bool streaming = callback != nullptr;
    prefill(req, stream, streaming, rep);
#ifdef EL_TEST_HOOKS
    if (req.probe > 0 && rep.finish_reason.empty()) {
        probe(req, rep);
    }
#endif
    const std::string text = decode(req, sampler.get(), stream, streaming, rep);
    deadline_ns = 0;

    // An aborted llama_decode may have left part of a batch in the cache, which the
    // mirror does not describe: only then (and after a planted corruption) is the guard
    // left armed.
    if (llama_memory_seq_pos_max(llama_get_memory(ctx_), cache_->seq()) == (llama_pos) cache_->tokens().size() - 1 &&
        req.corrupt == Corruption::None) {
        guard.disarm();
        settle.ok = true;
    }

    const ParsedOutput out = parse_output(
        text, req, rep.finish_reason == "length", [&stream](common_chat_msg & m) { stream.assign_ids(m); },
        [this] { return new_call_id(); });
    if (!out.msg.tool_calls.empty() && rep.finish_reason == "stop") {
        rep.finish_reason = "tool_calls";
    }
    stream.update(out.msg, true);
    return dump(result_json(out, rep, req.top_logprobs >= 0));
}

// Make the slot's cache hold the longest prefix of the prompt it can hold exactly.
void Engine::reuse(const Request & req, CallReport & rep) {
    const auto t0 = steady::now();
    test_pos_shift_ = 0;
    if (!req.cache_prompt) {
        cache_->clear();
    }
    const std::vector<llama_token> before = req.corrupt == Corruption::Other ? cache_->tokens() : std::vector<llama_token>{};
    rep.n_reused = cache_->prepare(req.prompt, req.unsafe_reuse);
#ifdef EL_TEST_HOOKS
    if (req.corrupt != Corruption::None) {
        plant_corruption(req, before, rep);
    }
#endif
    if (req.unsafe_reuse == UnsafeReuse::Corrupt && rep.n_reused > 0) {
        std::vector<llama_token> wrong(req.prompt.begin(), req.prompt.begin() + rep.n_reused);
        std::reverse(wrong.begin() + 1, wrong.end());
        cache_->clear();
        if (evaluate(wrong, 0, wrong.size(), false) != 0) {
            fail("test hook: could not evaluate the corrupted prefix");
        }
        cache_->relabel(std::vector<llama_token>(req.prompt.begin(), req.prompt.begin() + rep.n_reused));
    }
    rep.ms_reset = ms_since(t0);
}

#ifdef EL_TEST_HOOKS
// Test hook "probe": instead of decoding, evaluate a copy of the prompt's first tokens
// after the prompt and report, at every position of the copy, the log probability of the
// token the copy goes on with and the model's top token. A model that has read its
// context predicts a copy of it sharply, so one wrong, missing or extra token in the
// cache shows at the place where the copy reaches it. Both handles of a comparison run
// these batches in the same shapes at the same positions.
void Engine::probe(const Request & req, CallReport & rep) {
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
        const size_t pos0 = cache_->tokens().size() + test_pos_shift_;
        batch_.n_tokens   = (int32_t) m;
        for (size_t i = 0; i < m; i++) {
            batch_.token[i]     = req.prompt[from + i];
            batch_.pos[i]       = (llama_pos) (pos0 + i);
            batch_.n_seq_id[i]  = 1;
            batch_.seq_id[i][0] = cache_->seq();
            batch_.logits[i]    = true;
        }
        if (const int32_t rc = llama_decode(ctx_, batch_); rc != 0) {
            decode_failed(rc, "probing");
        }
        cache_->append(req.prompt.data() + from, m);
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
void Engine::plant_corruption(const Request & req, const std::vector<llama_token> & before, CallReport & rep) {
    size_t n = rep.n_reused;
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
    cache_->clear();
    if (evaluate(held, 0, held.size(), false) != 0) {
        fail("test hook: could not evaluate the corrupted prefix");
    }
    if (req.corrupt == Corruption::Shift) {
        // a hole at `at`: the tokens from there on, and all that follow, one position late
        llama_memory_seq_add(llama_get_memory(ctx_), cache_->seq(), (llama_pos) at, -1, 1);
        test_pos_shift_ = 1;
    }
    rep.n_reused = n;
}
#endif

// Evaluate the prompt past what was reused. A cancel here ends the call as "cancelled"
// (the guard clears the half-evaluated cache); a failed decode throws.
void Engine::prefill(const Request & req, DeltaStream & stream, bool streaming, CallReport & rep) {
    const size_t n_prompt = req.prompt.size();
    const size_t n_reused = rep.n_reused;
    // Long prompts report their evaluation, batch by batch, to a streaming caller.
    std::function<void(size_t)> progress;
    if (streaming && n_prompt - n_reused > (size_t) cfg_.n_batch) {
        progress = [&](size_t done) { stream.progress(done - n_reused, n_prompt - n_reused); };
    }
    const auto t0 = steady::now();
    int32_t rc = 0;
    if (cache_->wants_checkpoints()) {
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
                    cache_->save_checkpoint();
                }
            }
        }
        if (rc == 0) {
            rc = evaluate(req.prompt, at, n_prompt, true, progress);
        }
    } else {
        rc = evaluate(req.prompt, n_reused, n_prompt, true, progress);
    }
    rep.ms_prefill = ms_since(t0);
    if (req.fail_after_prefill) {
        throw std::runtime_error("test hook: failure after prefill");
    }
    if (rc != 0) {
        if (rc != kRemoteLost && (rc == 2 || should_stop())) {
            rep.finish_reason = "cancelled";
        } else {
            decode_failed(rc, "evaluating the prompt");
        }
    }
}

// Sample until an end token, a stop string, a limit or a cancel; returns the text
// generated (stop strings excluded) and sets the finish reason.
std::string Engine::decode(const Request & req, common_sampler * sampler, DeltaStream & stream, bool streaming,
                           CallReport & rep) {
    const auto t0 = steady::now();
    std::vector<uint8_t> biased;
    if (req.greedy) {
        biased.assign(llama_vocab_n_tokens(vocab_), 0);
        for (const auto & b : req.greedy_bias) {
            biased[b.first] = 1;
        }
    }
    std::string text;
    if (req.has_canned_output && rep.finish_reason.empty()) {
        text = req.canned_output;  // test hook: exercise parsing and recovery on exact text
        rep.finish_reason = "stop";
    }
    while (rep.finish_reason.empty()) {
        if (should_stop()) {
            rep.finish_reason = "cancelled";
            break;
        }
        llama_token tok;
        if (rep.n_decoded < req.forced.size()) {
            tok = req.forced[rep.n_decoded];
            if (!req.forced_only) {
                common_sampler_accept(sampler, tok, true);  // sampling goes on after them
            }
        } else if (req.forced_only) {
            rep.finish_reason = "stop";  // the forced text ends as if the model ended it
            break;
        } else if (req.greedy) {
            tok = argmax_token(req, biased);
        } else {
            tok = common_sampler_sample(sampler, ctx_, -1);
            common_sampler_accept(sampler, tok, true);
        }
        rep.n_decoded++;
        if (req.top_logprobs >= 0) {
            rep.logprobs.push_back(logprob_entry(llama_get_logits_ith(ctx_, -1), tok, req.top_logprobs));
        }
        if (llama_vocab_is_eog(vocab_, tok)) {
            rep.finish_reason = "stop";
            break;
        }
        const size_t scan_from = text.size() + 1 > req.max_stop_len ? text.size() + 1 - req.max_stop_len : 0;
        text += common_token_to_piece(ctx_, tok, req.sampling.preserved_tokens.count(tok) > 0);

        StopScan stop = scan_stops(text, scan_from, req.stops);
        if (stop.found != std::string::npos) {
            text.resize(stop.found);
            rep.finish_reason = "stop";
            break;
        }
        // "_test.force" decodes exactly its tokens and stops there as at a limit;
        // "_test.force_output" ends as if the model ended it (top of the loop).
        const bool forced_done = !req.forced.empty() && !req.forced_only && rep.n_decoded >= req.forced.size();
        if ((int32_t) rep.n_decoded >= req.max_tokens || forced_done) {
            rep.finish_reason = "length";
            break;
        }
        if ((int32_t) cache_->tokens().size() + 1 >= n_ctx_) {
            rep.finish_reason = "length";
            rep.truncated     = true;
            break;
        }
        if (streaming) {
            const std::string visible = text.substr(0, utf8_complete_prefix(text.substr(0, text.size() - stop.hold)));
            try {
                if (!stream.update(common_chat_parse(visible, true, req.parser), false)) {
                    rep.finish_reason = "cancelled";
                    break;
                }
            } catch (const std::exception &) {
                // a prefix the parser cannot read yet; the next token may fix it
            }
        }
        // Feed the sampled token back. Only now does it enter the cache and the mirror.
        const int32_t drc = evaluate(std::vector<llama_token>{tok}, 0, 1, true);
        if (drc != 0) {
            if (drc != kRemoteLost && (drc == 2 || should_stop())) {
                rep.finish_reason = "cancelled";
                break;
            }
            decode_failed(drc, "generating");
        }
    }
    rep.ms_decode = ms_since(t0);
    return text;
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
        {"abi_version", EL_ABI_VERSION},
    };
}

}  // namespace el
