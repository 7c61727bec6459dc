// engine.h -- the engine behind one handle: the model, its context and chat templates,
// the conversation slots, and the steps of one generate call.
//
// Invariant: calls run one at a time under `mu`; from the moment a call touches a slot's
// cache until it completes, a CacheGuard clears that slot on any way out that leaves the
// cache and its mirror out of step; after a fatal backend error the engine is dead and
// runs nothing again.
#pragma once

#include "chat.h"
#include "config.h"
#include "el_shim.h"
#include "json_args.h"
#include "parser_cache.h"
#include "llama.h"
#include "rpc.h"
#include "slots.h"
#include "token_cache.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
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

    // One generate call (el_generate / el_generate_stream); the caller holds `mu`.
    std::string run(const char * messages_json, const char * tools_json, const char * options_json,
                    el_stream_cb callback, void * user_data);

    // el_stats' object; the caller holds `mu`.
    json stats() const;

    // el_forget; the caller holds `mu`.
    void forget(const char * session) { slots_->forget(session); }

    // Why the engine is dead (empty while it is alive).
    const std::string & dead_reason() const { return dead_reason_; }

    std::mutex           mu;              // serializes calls on this handle
    // el_cancel bumps cancel_epoch; a call stops once it differs from the epoch it read
    // when it began (before waiting for mu), so a cancel is never lost to timing.
    std::atomic<uint64_t> cancel_epoch{0};
    std::atomic<uint64_t> call_epoch{0};    // of the call holding mu
    std::atomic<bool>     closing{false};   // set once by el_close, never reset: no call starts or goes on
    std::atomic<int64_t>  deadline_ns{0};

  private:
    void load_model();
    void create_context();
    bool should_stop() const;
    static bool abort_callback(void * data);
    [[noreturn]] void decode_failed(int32_t rc, const char * where);
    int32_t check_remote(int32_t rc);
    std::string new_call_id();

    // The steps of run(), in order.
    void        reuse(const Request & req, CallReport & rep);
    void        prefill(const Request & req, DeltaStream & stream, bool streaming, CallReport & rep);
    std::string decode(const Request & req, common_sampler * sampler, DeltaStream & stream, bool streaming,
                       CallReport & rep);

    void probe(const Request & req, CallReport & rep);
    void plant_corruption(const Request & req, const std::vector<llama_token> & before, CallReport & rep);

    int32_t evaluate(const std::vector<llama_token> & toks, size_t from, size_t to, bool logits_last,
                     const std::function<void(size_t)> & progress = nullptr);
    json        device_names() const;
    json        logprob_entry(const float * logits, llama_token chosen, int32_t top_n) const;
    llama_token argmax_token(const Request & req, const std::vector<uint8_t> & biased) const;

    Config                    cfg_;
    llama_model *             model_ = nullptr;
    llama_context *           ctx_   = nullptr;
    const llama_vocab *       vocab_ = nullptr;
    common_chat_templates_ptr templates_;
    std::unique_ptr<TokenCache> tokens_;  // recent prompts' tokens (token_cache.h)
    ParserCache               parsers_;  // recent output parsers, loaded (parser_cache.h)
    std::unique_ptr<Slots>    slots_;
    PromptCache *             cache_ = nullptr;  // the slot serving the current call
    int32_t                   n_ctx_ = 0;        // tokens per slot
    llama_batch               batch_{};          // n_batch tokens, reused by every evaluate()
    std::mt19937_64           rng_{std::random_device{}()};
    RpcLink                   rpc_;           // remote devices (config "rpc"); inactive without
    std::vector<float>        tensor_split_;  // llama_max_devices() entries, alive while loading

    // Set when the backend fails fatally (a lost GPU, a failed compute): every later
    // call on the handle is refused, since nothing it computes could be trusted.
    std::string dead_reason_;
    bool        dead_free_ok_ = false;  // dead from a lost RPC server: freeing is still safe
    bool        simulate_device_loss_ = false;  // test hook: llama_decode reports a fatal backend error
    size_t      test_pos_shift_       = 0;      // test hook: positions of this call's tokens run one late
};

}  // namespace el
