// engine.h -- the engine behind one handle: the model, its context and chat templates,
// the conversation slots, and the steps of one generate call.
//
// Invariant: whatever touches the context or the slots runs under `mu`, and the request
// path's caches (messages, tokens, template values, grammars) under `prep_mu_`, which no call
// holds while it waits for `mu`; calls run concurrently, one per slot (scheduler.h), and a
// call touches only its own slot; from
// the moment a call touches its slot's cache until it completes, a CacheGuard clears that
// slot on any way out that leaves the cache and its mirror out of step; after a fatal
// backend error the engine is dead and runs nothing again.
#pragma once

#include "chat.h"
#include "config.h"
#include "el_shim.h"
#include "embedding.h"
#include "json_args.h"
#include "llama.h"
#include "message_cache.h"
#include "patched.h"
#include "request.h"
#include "rpc.h"
#include "sampling.h"
#include "scheduler.h"
#include "slots.h"
#include "test_hooks.h"
#include "timing.h"
#include "token_cache.h"

#include <atomic>
#include <chrono>
#include <deque>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

struct common_sampler;

namespace el {

struct Request;
struct CallReport;
class DeltaStream;

class Engine {
  public:
    Engine() = default;
    ~Engine();

    // Load the model, its templates and a context; throws UserError on bad config. Two
    // steps rather than a constructor, so that the destructor frees a half-open engine.
    void open(const char * config_json);
    Engine(const Engine &) = delete;
    Engine & operator=(const Engine &) = delete;

    // One generate call (el_generate / el_generate_stream), on the caller's thread; it
    // takes `mu` itself. `epoch` is cancel_epoch as it was when the call began.
    std::string run(const char * messages_json, const char * tools_json, const char * options_json,
                    el_stream_cb callback, void * user_data, uint64_t epoch);

    // el_embed (embedding.cpp): pooled embeddings from a context of the engine's own,
    // created on first use; never takes `mu`, so generation goes on meanwhile.
    std::string embed(const char * input_json, const char * options_json, uint64_t epoch);

    // el_stats' object; the caller holds `mu`.
    json stats() const;

    // el_cancel_request: stop the calls in flight with this request_id, and one that
    // begins with it later (the last kRemembered ids are kept). Never waits for `mu`.
    void cancel_request(const std::string & request_id);

    // el_forget; throws EL_E_CLOSED or EL_E_DEVICE when the engine is closing or dead. What the caches derived from the
    // session's requests goes too: its messages and prompts, and the shared template values
    // (every session's, rebuilt on their next call: the store cannot tell them apart). Takes
    // prep_mu_ and then mu, so that it never holds mu while a preparation runs.
    // A NULL session with a scope forgets every owner of that scope; both NULL, everything.
    void forget(const char * scope, const char * session);

    // Why the engine is dead (empty while it is alive).
    const std::string & dead_reason() const { return dead_reason_; }

    std::mutex           mu;              // the context lock (see the invariant)
    // The request path's caches (tokens_, messages_, message_values_, grammars_): one call's
    // preparation at a time, never under mu, so that preparing a call never holds up the
    // running calls' decode steps. Taken before mu where both are held (forget).
    std::mutex           prep_mu_;
    // el_cancel bumps cancel_epoch; a call stops once it differs from the epoch it read
    // when it began (before waiting for mu), so a cancel is never lost to timing. It stops
    // every call in flight on the handle.
    std::atomic<uint64_t> cancel_epoch{0};
    std::atomic<bool>     closing{false};   // set once by el_close, never reset: no call starts or goes on

  private:
    // What one call owns while it runs: its stop conditions and its slot.
    struct Call : CallHooks {
        std::atomic<bool> cancelled{false};   // by el_cancel_request
        std::string   request_id;             // set once, under calls_mu_
        uint64_t      epoch       = 0;
        int64_t       deadline_ns = 0;        // steady clock; 0: none
        PromptCache * cache       = nullptr;  // its slot's cache, once routed
    };
    // A decoding call's place in a step (scheduler.h), and which call it is.
    struct Decoding : Scheduler::Participant {
        const Call * call = nullptr;
    };
    struct Prepared;  // run()'s parsed request, sampler and report (engine_call.h)

    // evaluate()'s status when a remote server was lost (beside llama_decode's own codes),
    // and for a batch of calls that were in flight when another call found the backend dead.
    static constexpr int32_t kRemoteLost = -100;
    static constexpr int32_t kDead       = -101;

    // The open side (opening.cpp).
    void load_model();
    void create_context();
    json device_names() const;
    std::string fingerprint() const;
    static std::string new_call_id();

    // The steps of run(), in order.
    void        check_open() const;  // throws when closing or dead; under mu
    void        prepare(Prepared & p, const char * messages_json, const char * tools_json, const char * options_json);
    std::string admit(Prepared & p, std::unique_lock<std::mutex> & lock);
    bool        route(Prepared & p, std::unique_lock<std::mutex> & lock);
    void        reuse(Prepared & p, std::unique_lock<std::mutex> & lock);
    void        prefill(Prepared & p, std::unique_lock<std::mutex> & lock, DeltaStream & stream, bool streaming);
    std::string decode(Prepared & p, std::unique_lock<std::mutex> & lock, DeltaStream & stream, bool streaming);
    void        consume(Prepared & p, DeltaStream & stream, bool streaming, llama_token tok, std::string & text);

    void probe(const Request & req, const Call & call, CallReport & rep);
    void plant_corruption(Prepared & p, std::unique_lock<std::mutex> & lock, const std::vector<llama_token> & before);

    // The evaluation side (evaluation.cpp): every llama_decode, and what may stop one.
    bool should_stop(const Call & c) const;
    template <typename Calls> bool all_stop(const Calls & calls) const;
    static bool abort_callback(void * data);
    [[noreturn]] void decode_failed(int32_t rc, const char * where);
    int32_t check_remote(int32_t rc);
    int32_t evaluate(Call & call, std::unique_lock<std::mutex> & lock, const std::vector<llama_token> & toks,
                     size_t from, size_t to, bool logits_last, const std::function<bool(size_t)> & progress = nullptr,
                     const std::function<void()> & on_done = nullptr);
    int32_t run_batch(const std::vector<const Call *> & calls);
    int32_t run_step(const std::vector<Scheduler::Participant *> & batch);
    void    track(Call * call, bool in);
    bool    evaluation_should_stop();
    // While it lives, the backend works for `call` (the RPC watchdog watches it): a prompt
    // chunk or step (run_batch), or a slot's state saved, restored or checkpointed.
    struct Working {
        Engine &                                        e;
        std::list<std::vector<const Call *>>::iterator at;
        Working(Engine & engine, std::vector<const Call *> calls);
        ~Working();
        Working(const Working &) = delete;
        Working & operator=(const Working &) = delete;
    };

    // The token after an evaluation, and its logprobs (token_choice.cpp).
    void        first_token(Prepared & p);
    void        choose_next(Prepared & p, int32_t row);
    json        logprob_entry(const float * logits, llama_token chosen, int32_t top_n) const;
    llama_token argmax_token(const Request & req, int32_t row) const;
    void        route_first_token(Prepared & p, int32_t row);
    // Self-speculation (speculation.cpp): whether a call may be offered drafts, and the check
    // of a draft after the step that evaluated it.
    bool        may_speculate(const Prepared & p) const;
    void        check_draft(Prepared & p, const std::vector<llama_token> & draft, int32_t row);
    bool        emit_accepted(Prepared & p, std::unique_lock<std::mutex> & lock, DeltaStream & stream, bool streaming,
                              std::string & text);

    Config                    cfg_;
    llama_model *             model_ = nullptr;
    llama_context *           ctx_   = nullptr;
    const llama_vocab *       vocab_ = nullptr;
    common_chat_templates_ptr templates_;
    TemplateInfo              template_info_;  // whose template, and what it can show (opening.cpp)
    // Tool and schema grammars parsed once, cloned per call (common_grammar_cache, a patch to
    // common/sampling; null without it); it holds the model's vocab, so it goes before the model.
    struct GrammarCacheFree {
        void operator()(common_grammar_cache * c) const { patched::grammar_cache_free(c); }
    };
    std::unique_ptr<common_grammar_cache, GrammarCacheFree> grammars_;
    std::unique_ptr<TokenCache> tokens_;  // recent prompts' tokens (token_cache.h)
    MessageCache                messages_;  // recently read messages (message_cache.h)
    std::shared_ptr<common_chat_msg_values> message_values_ = patched::message_values_init();
    std::unique_ptr<Slots>    slots_;
    std::unique_ptr<Scheduler> sched_;           // admission and who evaluates (scheduler.h)
    int32_t                   n_ctx_ = 0;        // tokens per slot
    llama_batch               batch_{};          // n_batch tokens, reused by every evaluation
    // The calls in flight (for el_cancel_request) and those the backend works for now (Working:
    // for llama_decode's abort callback and the RPC watchdog); both read from other threads.
    std::mutex                           calls_mu_;
    std::vector<Call *>                  in_flight_;
    std::list<std::vector<const Call *>> working_;
    // What the context evaluated, for el_stats: decode steps (one token per call in it) and
    // prompt batches, with the time llama_decode took for them. Under mu.
    struct {
        uint64_t steps = 0, step_tokens = 0, batches = 0, batch_tokens = 0;
        double   ms_steps = 0, ms_batches = 0;
    } eval_;
    static constexpr size_t   kRemembered = 64;
    std::deque<std::string>   cancelled_ids_;  // most recent last
    std::mutex                embedder_mu_;   // guards creating embedder_
    std::unique_ptr<Embedder> embedder_;      // el_embed's context, once asked for
    RpcLink                   rpc_;           // remote devices (config "rpc"); inactive without
    std::vector<float>        tensor_split_;  // llama_max_devices() entries, alive while loading

    // Set when the backend fails fatally (a lost GPU, a failed compute): every later
    // call on the handle is refused, since nothing it computes could be trusted.
    std::string       dead_reason_;
    std::atomic<bool> dead_{false};  // !dead_reason_.empty(), readable without mu
    bool        dead_free_ok_ = false;  // dead from a lost RPC server: freeing is still safe
};

}  // namespace el
