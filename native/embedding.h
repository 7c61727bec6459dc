// embedding.h -- el_embed: pooled embeddings of texts or token arrays, from a context of
// their own beside the handle's generation context, on the same model weights.
//
// Invariant: an input's embedding depends only on that input (its tokens are evaluated in
// one batch on a cleared cache, so nothing another call ran changes it); the embedding
// context is created on first use, touched by one embed call at a time (`mu`), evaluated
// on the process's compute lane like every other llama_decode, and freed before the model.
#pragma once

#include "config.h"
#include "json_args.h"
#include "llama.h"

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace el {

class Embedder {
  public:
    Embedder(llama_model * model, const Config & cfg);
    ~Embedder();
    Embedder(const Embedder &)             = delete;
    Embedder & operator=(const Embedder &) = delete;

    // el_embed's whole result for `input_json` (a string, an array of strings, an array of
    // token ids, or an array of such arrays) and `options_json`; throws UserError on bad input.
    // `cancelled` (a closing or cancelled handle) and the call's timeout_ms are polled while
    // it waits for another embed call, between inputs and by llama_decode's abort callback.
    json embed(const char * input_json, const char * options_json, const std::function<bool()> & cancelled);

  private:
    struct Input {
        std::vector<llama_token> tokens;
        bool                     truncated = false;
    };
    std::vector<Input> read_inputs(const json & input, bool truncate) const;
    std::vector<float> pooled(const Input & in, bool normalize, const std::function<bool()> & stop);
    void               create();

    llama_model *       model_;
    const llama_vocab * vocab_;
    Config              cfg_;
    llama_context *     ctx_ = nullptr;
    llama_batch         batch_{};
    int32_t             n_ctx_   = 0;
    std::string         pooling_;  // "mean", "cls" or "last": what the context pools
    std::function<bool()> stop_;   // the running call's, for the abort callback
    std::mutex            mu_;     // one embed call at a time on this context
};

}  // namespace el
