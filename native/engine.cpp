// engine.cpp -- the steps of one generate call; see engine.h. Opening the model is in
// opening.cpp, the evaluation side (llama_decode, its batches, abort and cancel) in
// evaluation.cpp, and the choice of each next token in token_choice.cpp.
//
// run() in steps: parse the request (request.cpp) and set up its sampler; pick the
// slot and reuse its cached prefix (slots.cpp, prompt_cache.cpp); prefill the rest,
// saving checkpoints where the cache cannot be trimmed; decode token by token,
// streaming deltas (delta_stream.cpp); read the text back into a message and write
// the result (result.cpp).

#include "engine_call.h"

#include "backend.h"
#include "compute_lane.h"
#include "common.h"
#include "delta_stream.h"
#include "unlocked.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>

namespace el {


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

std::string Engine::run(const char * messages_json, const char * tools_json, const char * options_json,
                        el_stream_cb callback, void * user_data, uint64_t epoch) {
    Prepared p;
    p.t0         = steady::now();
    p.call.epoch = epoch;
    if (closing || dead_) {  // the reason is read under mu; a live handle does not wait for it here
        std::lock_guard<std::mutex> lock(mu);
        check_open();
    }
    // Without the handle's mutex: running calls' decode steps go on while this call reads,
    // renders and tokenizes its request, however large it is. What llama.cpp's template,
    // parser or grammar code throws here, it throws about the request (error.h).
    try {
        prepare(p, messages_json, tools_json, options_json);
    } catch (const Error &) {
        throw;
    } catch (const std::bad_alloc &) {
        throw;
    } catch (const std::exception & e) {
        fail(EL_E_INVALID, e.what());
    }
    std::unique_lock<std::mutex> lock(mu);
    check_open();
    struct Tracked {
        Engine & e;
        Call *   call;
        ~Tracked() { e.track(call, false); }
    } tracked{*this, &p.call};
    track(&p.call, true);
    if (std::string early = admit(p, lock); !early.empty()) {
        return early;
    }
    DeltaStream stream(callback, user_data, p.req.recover, [] { return new_call_id(); });
    if (p.req.top_logprobs >= 0) {
        stream.with_logprobs(&p.rep.logprobs);
    }
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
        stream.set_prompt(p.rep.n_prompt, p.rep.n_reused);
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

void Engine::forget(const char * scope, const char * session) {
    std::lock_guard<std::mutex> prep(prep_mu_);
    std::lock_guard<std::mutex> lock(mu);
    check_open();
    // A whole scope: the request caches cannot tell its keys apart cheaply, so all of them
    // go (they only save preparation time; their pressure is shared anyway).
    const bool all   = scope == nullptr && session == nullptr;
    const bool whole = scope != nullptr && session == nullptr;
    Owner      owner;  // el_forget names a session of the default scope; el_forget_scope, a named one
    owner.session = session != nullptr ? session : "";
    if (scope != nullptr || cfg_.scope) {
        owner.scope  = scope != nullptr ? scope : *cfg_.scope;
        owner.scoped = true;
    }
    const std::string key = owner.key();
    slots_->forget(all ? nullptr : &owner, whole);
    messages_.forget(all || whole ? nullptr : key.c_str());
    tokens_->forget(all || whole ? nullptr : key.c_str());
    if (message_values_) {
        message_values_ = patched::message_values_init();
    }
}

void Engine::check_open() const {
    if (closing) {
        fail(EL_E_CLOSED, "invalid or closed handle");
    }
    if (!dead_reason_.empty()) {
        fail(EL_E_DEVICE, dead_reason_);
    }
}

// Parse the request and set up its sampler, under prep_mu_ only (the caches of the request
// path are the handle's; nothing here touches the context or the slots).
void Engine::prepare(Prepared & p, const char * messages_json, const char * tools_json, const char * options_json) {
    std::lock_guard<std::mutex> lock(prep_mu_);
    const ModelView view{cfg_,    template_info_, vocab_,    templates_.get(), n_ctx_, slots_->cache(0).wants_checkpoints(),
                         *tokens_, messages_, message_values_};
    RequestCaches   caches(view);  // kept only if the request gets this far: see the end
    p.req = parse_request(view, messages_json, tools_json, options_json);
#ifdef EL_TEST_HOOKS
    p.call.device_lost = p.req.device_lost;
#endif
    p.call.request_id  = p.req.request_id;
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
    patched::use_grammar_cache(p.req.sampling, grammars_.get());  // a grammar seen before is cloned, not parsed
    p.sampler.reset(common_sampler_init(model_, p.req.sampling));
    if (!p.sampler) {
        fail("could not set up sampling (invalid grammar or parameters)");
    }
    if (!p.req.answer_grammar.empty()) {
        common_params_sampling answer = p.req.sampling;
        answer.grammar      = common_grammar(COMMON_GRAMMAR_TYPE_USER, p.req.answer_grammar);
        answer.grammar_lazy = false;
        answer.grammar_triggers.clear();
        patched::use_grammar_cache(answer, grammars_.get());
        p.answer_sampler.reset(common_sampler_init(model_, answer));
        if (!p.answer_sampler) {
            fail("could not set up sampling (invalid response_format schema)");
        }
    }
    CallReport & rep = p.rep;
    rep.ms_sampler        = ms_since(t_sampler);
    rep.ms_prepare        = ms_since(p.t0);
    rep.ms_template       = p.req.ms_template;
    rep.ms_tokenize       = p.req.tokenizing.ms_tokenize;
    rep.n_tokenize_reused = p.req.tokenizing.n_reused;
    rep.n_render_reused   = p.req.n_render_reused;
    rep.n_messages_reused = p.req.n_messages_reused;
    rep.n_prompt          = p.req.prompt.size();
    rep.warnings          = p.req.warnings;
    caches.accept(p.req);
}

// Wait for a turn on the handle: a slot this call can take (Scheduler::admit), in arrival
// order among the calls that can start. Returns the whole result when the call ends here: a
// prepare_only test call, or one cancelled (or timed out) while it waited; empty once the
// call was admitted.
std::string Engine::admit(Prepared & p, std::unique_lock<std::mutex> & lock) {
    CallReport & rep = p.rep;
    if (!p.req.prepare_only && !should_stop(p.call)) {
        if (sched_->admit(lock, [&] { return should_stop(p.call); }, [&] { return slots_->can_pick(p.req.owner); })) {
            return "";
        }
        if (closing) {
            fail(EL_E_CLOSED, "invalid or closed handle");
        }
    }
    // Cancelled (or timed out) before its turn: it ends before it is given a slot, so
    // nothing on the handle changes. The prepare_only test hook ends here too, to check
    // the request path without evaluating anything.
    rep.finish_reason = p.req.prepare_only ? "prepare_only" : "cancelled";
    json out          = result_json(ParsedOutput{}, rep, p.req.top_logprobs >= 0);
    if (p.req.prepare_only) {
        out["prepared"] = prepared_json(p.req);
        out["last_message_rendered"] = p.req.last_message_rendered;  // how the checkpoint was placed
        out["history_prompt"]        = p.req.history_prompt;         // what that render gave
    }
    return dump(out);
}

// Give the call its slot (Slots::pick). Admission let the call in only once its slot was
// free, under the same hold of the mutex, so the loop below waits only if that ever broke.
// False if the call stopped first.
bool Engine::route(Prepared & p, std::unique_lock<std::mutex> & lock) {
    const Working working(*this, {&p.call});  // a slot's state saved or restored is remote work too
    for (;;) {
        Slots::Picked how;
        const size_t  slot = slots_->pick(p.req.owner, p.req.prompt, how);
        p.rep.restored_from_host = how.restored_from_host;
        p.rep.shared_prefix      = how.shared;
        p.rep.restored_from_disk = how.restored_from_disk;
        if (slot != Slots::kBusy) {
            p.rep.slot   = slot;
            p.rep.routed = true;
            p.call.cache = &slots_->cache(slot);
            return true;
        }
        if (should_stop(p.call)) {
            if (closing) {
                fail(EL_E_CLOSED, "invalid or closed handle");
            }
            return false;
        }
        sched_->wait_a_little(lock);
    }
}

// Make the slot's cache hold the longest prefix of the prompt it can hold exactly.
void Engine::reuse(Prepared & p, std::unique_lock<std::mutex> & lock) {
    const Request & req   = p.req;
    PromptCache &   cache = *p.call.cache;
    const Working   working(*this, {&p.call});  // a checkpoint restored is remote work too
    const auto      t0 = steady::now();
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

// Evaluate the prompt past what was reused, and choose the first token from its logits.
// A cancel here ends the call as "cancelled" (the guard clears the half-evaluated cache);
// a failed decode throws.
void Engine::prefill(Prepared & p, std::unique_lock<std::mutex> & lock, DeltaStream & stream, bool streaming) {
    const Request & req      = p.req;
    const size_t    n_prompt = req.prompt.size();
    const size_t    n_reused = p.rep.n_reused;
    // Long prompts report their evaluation, batch by batch, to a streaming caller.
    std::function<bool(size_t)> progress;
    if (streaming && n_prompt - n_reused > (size_t) cfg_.n_batch) {
        progress = [&](size_t done) { return stream.progress(done - n_reused, n_prompt - n_reused); };
    }
    const std::function<void()> first = [&] { first_token(p); };
    const auto t0 = steady::now();
    int32_t rc = 0;
    if (p.call.cache->wants_checkpoints()) {
        // Where the cache cannot be trimmed, save checkpoints at the places a later
        // prompt most often diverges: where the last message starts (the same history
        // with a different question), where the reply's turn opens (a template that
        // renders the reply otherwise in the next call's history) and one token short
        // of the end (the same prompt again, or this prompt plus the reply and more).
        size_t at = n_reused;
        // How far back a sliding window's trim reaches after this call: llama.cpp's SWA cache
        // keeps n_ubatch cells beyond the window (measured on gemma-3-270m, n_ubatch 512: a
        // 400-token reply trimmed back, a 520-token one did not), of which half is counted. Only
        // for one conversation on the handle (others' cells share that cache) and one that
        // reused a prefix (a first call's checkpoints are the ones the host and disk tiers
        // keep). A trim that falls short is seen (holds_exactly) and the last message's
        // checkpoint serves: never a wrong cache, at worst a longer prefill.
        const bool   window = p.call.cache->kind() == MemoryKind::SlidingWindow;
        const size_t reach  = window && cfg_.n_seq == 1 && n_reused > 0 ? (size_t) std::min(cfg_.n_batch, 512) / 2 : 0;
        for (size_t stop : {req.last_message_start, req.generation_start, n_prompt - 1}) {
            // Each checkpoint splits the prefill: one more pass over the weights (~10 ms on
            // gemma-3-270m, a third of a next turn's wall). Past the last message, one the
            // window's trim will reach after this call is not worth that pass.
            const bool trim_serves = stop > req.last_message_start && n_prompt - stop + req.max_tokens <= reach;
            if (rc == 0 && stop > at && stop < n_prompt && !trim_serves) {
                rc = evaluate(p.call, lock, req.prompt, at, stop, false, progress);
                at = stop;
                if (rc == 0) {
                    const Working working(*this, {&p.call});
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
        if (d.draft.empty()) {
            choose_next(p, row);
            return;
        }
        p.call.cache->append(d.draft.data(), d.draft.size());
        check_draft(p, d.draft, row);  // keeps the accepted part, in the cache and the mirror
    };
    const bool speculate = may_speculate(p);
    // A draft never pushes another call's token out of the step: every slot's token and draft
    // fit in one batch (speculation.h).
    const size_t draft_room = (size_t) std::max(0, cfg_.n_batch / cfg_.n_seq - 1);
    sched_->enter_decode(d);
    struct Leave {
        Scheduler &               sched;
        Scheduler::Participant & d;
        ~Leave() { sched.leave_decode(d); }
    } leave{*sched_, d};
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
        p.rep.n_argmax += p.next_argmax ? 1 : 0;
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
        d.draft.clear();
        // Drafts only while the call runs alone: on a CPU a drafted row costs a share of a step
        // (speculation.h), and a shared step's cost is every call's wait; 0.72x for a call
        // decoding beside one that drafted (make bench-speculative, before this rule).
        if (speculate && sched_->running() == 1 && p.pace.ready()) {
            const size_t left = std::min<size_t>((size_t) (p.req.max_tokens - (int32_t) p.rep.n_decoded),
                                                 (size_t) std::max<int64_t>(0, n_ctx_ - (int64_t) d.pos - 2));
            const size_t most = std::min({left, draft_room, p.pace.length});
            d.draft           = draft_tokens(p.req.speculation, p.call.cache->tokens(), tok, most);
            p.rep.n_drafted += d.draft.size();
        }
        sched_->step(lock, d);
        p.rep.n_batched_max = std::max(p.rep.n_batched_max, d.step_size);
        if (d.rc != 0) {
            if (d.rc != kRemoteLost && d.rc != kDead && (d.rc == 2 || should_stop(p.call))) {
                p.rep.finish_reason = "cancelled";
                break;
            }
            decode_failed(d.rc, "generating");
        }
        if (!emit_accepted(p, lock, stream, streaming, text)) {
            break;
        }
    }
    p.rep.ms_decode = ms_since(t0);
    return text;
}

// The drafted tokens the last step accepted, turned into text in order as if each had been
// decoded alone; false once one of them ends the call (the rest stay in the cache: they were
// evaluated, and the mirror says so).
bool Engine::emit_accepted(Prepared & p, std::unique_lock<std::mutex> & lock, DeltaStream & stream, bool streaming,
                           std::string & text) {
    for (const auto & [tok, argmax] : p.accepted) {
        p.rep.n_decoded++;
        p.rep.n_argmax += argmax ? 1 : 0;
        {
            Unlocked unlocked(lock);
            consume(p, stream, streaming, tok, text);
        }
        if (!p.rep.finish_reason.empty()) {
            p.accepted.clear();
            return false;
        }
    }
    p.accepted.clear();
    return true;
}

// Turn one generated token into text: end at an end token, a stop string or a limit
// (setting the finish reason), else stream what became visible. Touches only the call's
// own state, so it runs without the handle's mutex.
void Engine::consume(Prepared & p, DeltaStream & stream, bool streaming, llama_token tok, std::string & text) {
    const Request & req = p.req;
    CallReport &    rep = p.rep;
    if (llama_vocab_is_eog(vocab_, tok)) {
        rep.finish_reason = "stop";
        // The end token is not part of the content: its logprob moves to "end" (the differential
        // tests compare it too), so that the content's logprobs join to the text.
        if (rep.logprobs.is_array() && rep.logprobs.size() >= rep.n_decoded && rep.n_decoded > 0) {
            rep.logprobs_end = rep.logprobs[rep.n_decoded - 1];
            rep.logprobs.erase(rep.logprobs.begin() + (std::ptrdiff_t) (rep.n_decoded - 1), rep.logprobs.end());
        }
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

}  // namespace el
