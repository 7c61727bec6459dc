// embedding.cpp -- el_embed's context and its one job: tokens in, one pooled vector per
// input out. See embedding.h.
//
// Why a context of its own: the generation context keeps conversations in its cache and
// outputs logits; an embedding wants the hidden states pooled over a sequence, a setting
// fixed when a llama.cpp context is created (llama_context_params.embeddings and
// pooling_type), and must not disturb any slot. The weights are shared; the cost is this
// context's own cache (embd_ctx tokens) and compute buffer, paid on the first el_embed.

#include "embedding.h"


#include "backend.h"
#include "common.h"
#include "compute_lane.h"
#include "el_shim.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <thread>

namespace el {

namespace {

constexpr size_t kMaxInputs = 2048;  // OpenAI's own limit per request

// The pooling the model's GGUF asks for, or "" when it names none (a generative model),
// read from its metadata since llama.cpp tells a context's pooling only once it exists.
std::string model_pooling(const llama_model * model) {
    char arch[64] = {0};
    if (llama_model_meta_val_str(model, "general.architecture", arch, sizeof(arch)) < 0) {
        return "";
    }
    char value[16] = {0};
    if (llama_model_meta_val_str(model, (std::string(arch) + ".pooling_type").c_str(), value, sizeof(value)) < 0) {
        return "";
    }
    switch (std::atoi(value)) {
        case LLAMA_POOLING_TYPE_MEAN: return "mean";
        case LLAMA_POOLING_TYPE_CLS: return "cls";
        case LLAMA_POOLING_TYPE_LAST: return "last";
        default: return "";  // none, or rank (a reranker's score, not an embedding)
    }
}

enum llama_pooling_type pooling_type(const std::string & name) {
    return name == "cls" ? LLAMA_POOLING_TYPE_CLS : name == "last" ? LLAMA_POOLING_TYPE_LAST : LLAMA_POOLING_TYPE_MEAN;
}

bool abort_embedding(void * data) {
    const auto * stop = static_cast<const std::function<bool()> *>(data);
    return *stop && (*stop)();
}

}  // namespace

Embedder::Embedder(llama_model * model, const Config & cfg) :
    model_(model), vocab_(llama_model_get_vocab(model)), cfg_(cfg) {
    // A generative model names no pooling: mean over the prompt's hidden states is what
    // llama.cpp's embedding example and most sentence encoders use.
    pooling_ = cfg_.embd_pooling != "auto" ? cfg_.embd_pooling : model_pooling(model_);
    if (pooling_.empty()) {
        pooling_ = "mean";
    }
}

Embedder::~Embedder() {
    if (batch_.token != nullptr) {
        llama_batch_free(batch_);
    }
    if (ctx_ != nullptr) {
        llama_free(ctx_);
    }
}

void Embedder::create() {
    llama_context_params cp = llama_context_default_params();
    const int32_t        n  = std::min<int32_t>(cfg_.embd_ctx, llama_model_n_ctx_train(model_));
    // One input is one batch of one ubatch: non-causal models must see a whole sequence in
    // one ubatch, and one batch is what makes an input's vector independent of the others.
    cp.n_ctx = cp.n_batch = cp.n_ubatch = (uint32_t) n;
    cp.n_seq_max                        = 1;
    cp.n_threads = cp.n_threads_batch = cfg_.n_threads;
    cp.embeddings                     = true;
    cp.pooling_type                   = pooling_type(pooling_);
    cp.flash_attn_type                = cfg_.flash_attn == "on"  ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                                      : cfg_.flash_attn == "off" ? LLAMA_FLASH_ATTN_TYPE_DISABLED
                                                                 : LLAMA_FLASH_ATTN_TYPE_AUTO;
    cp.no_perf                        = true;
    cp.abort_callback                 = abort_embedding;
    cp.abort_callback_data            = &stop_;
    thread_log_errors().clear();
    ctx_ = llama_init_from_model(model_, cp);
    if (ctx_ == nullptr) {
        const std::string & why = thread_log_errors();
        throw std::runtime_error("llama.cpp could not create the embedding context (embd_ctx " + std::to_string(n) +
                                 "; out of memory?)" + (why.empty() ? "" : ": " + why));
    }
    if (cfg_.deterministic) {
        use_reference_cpu_kernels(ctx_);
    }
    n_ctx_ = (int32_t) llama_n_ctx(ctx_);
    batch_ = llama_batch_init(n_ctx_, 0, 1);
}

std::vector<Embedder::Input> Embedder::read_inputs(const json & input, bool truncate) const {
    const auto tokens_of = [&](const json & item, size_t i) {
        Input in;
        if (item.is_string()) {
            const std::string & text = item.get_ref<const std::string &>();
            if (text.empty()) {
                fail("input " + std::to_string(i) + " is an empty string");
            }
            in.tokens = common_tokenize(vocab_, text, /*add_special=*/true, /*parse_special=*/false);
        } else if (item.is_array() && !item.empty()) {
            const int32_t n_vocab = llama_vocab_n_tokens(vocab_);
            for (const json & t : item) {
                if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= n_vocab) {
                    fail("input " + std::to_string(i) + " holds something that is not a token id in [0, " +
                         std::to_string(n_vocab) + ")");
                }
                in.tokens.push_back((llama_token) t.get<int64_t>());
            }
        } else {
            fail("input " + std::to_string(i) + " must be a non-empty string or array of token ids");
        }
        const int32_t limit = std::min<int32_t>(cfg_.embd_ctx, llama_model_n_ctx_train(model_));
        if ((int64_t) in.tokens.size() > limit) {
            if (!truncate) {
                fail("input " + std::to_string(i) + " is " + std::to_string(in.tokens.size()) +
                     " tokens, more than embd_ctx (" + std::to_string(limit) + "); pass \"truncate\": true to embed " +
                     "its first " + std::to_string(limit) + ", or open the model with a larger embd_ctx");
            }
            in.tokens.resize((size_t) limit);
            in.truncated = true;
        }
        return in;
    };
    std::vector<Input> out;
    const bool one = input.is_string() || (input.is_array() && !input.empty() && input[0].is_number());
    if (one) {
        out.push_back(tokens_of(input, 0));
        return out;
    }
    if (!input.is_array() || input.empty()) {
        fail("input must be a string, an array of strings, an array of token ids, or an array of such arrays");
    }
    if (input.size() > kMaxInputs) {
        fail("input holds " + std::to_string(input.size()) + " items; at most " + std::to_string(kMaxInputs));
    }
    for (size_t i = 0; i < input.size(); i++) {
        if (input[i].is_string() != input[0].is_string()) {
            fail("input mixes texts and token arrays (item " + std::to_string(i) + "); send one kind per call");
        }
        out.push_back(tokens_of(input[i], i));
    }
    return out;
}

// One input's pooled vector: its tokens in one batch on a cleared cache.
std::vector<float> Embedder::pooled(const Input & in, bool normalize, const std::function<bool()> & stop) {
    llama_memory_clear(llama_get_memory(ctx_), true);
    batch_.n_tokens = (int32_t) in.tokens.size();
    for (size_t i = 0; i < in.tokens.size(); i++) {
        batch_.token[i]     = in.tokens[i];
        batch_.pos[i]       = (llama_pos) i;
        batch_.n_seq_id[i]  = 1;
        batch_.seq_id[i][0] = 0;
        batch_.logits[i]    = true;  // every token's hidden state takes part in the pooling
    }
    stop_              = stop;
    const int32_t rc   = on_compute_lane([this] { return llama_decode(ctx_, batch_); });
    stop_              = nullptr;
    if (rc == 2) {
        return {};  // stopped: the caller says why (cancelled or timed out)
    }
    if (rc != 0) {
        fail(EL_E_INTERNAL, "llama_decode failed while embedding (status " + std::to_string(rc) + ")");
    }
    const float * v = llama_get_embeddings_seq(ctx_, 0);
    if (v == nullptr) {
        fail(EL_E_INTERNAL, "llama.cpp pooled no embedding for the input");
    }
    const int32_t      n_embd = llama_model_n_embd(model_);
    std::vector<float> out(v, v + n_embd);
    if (normalize) {
        common_embd_normalize(v, out.data(), n_embd, 2);  // unit length, as OpenAI's are
    }
    return out;
}

json Embedder::embed(const char * input_json, const char * options_json, const std::function<bool()> & cancelled) {
    const json input = parse_json_arg(input_json, "input");
    json       opt   = options_json == nullptr ? json::object() : parse_json_arg(options_json, "options");
    if (!opt.is_object()) {
        fail("options must be a JSON object");
    }
    reject_unknown_keys(opt, {"normalize", "truncate", "timeout_ms"}, "options");
    const bool    normalize  = get_bool(opt, "normalize", true);
    const bool    truncate   = get_bool(opt, "truncate", false);
    const int64_t timeout_ms = get_int(opt, "timeout_ms", 0, 0, INT32_MAX);
    if (input.is_null()) {
        fail("input is required");
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    const auto stop     = [&] { return cancelled() || (timeout_ms > 0 && std::chrono::steady_clock::now() > deadline); };
    const std::vector<Input> inputs = read_inputs(input, truncate);
    // Another embed call holds the context: wait for it, as bounded as everything else.
    std::unique_lock<std::mutex> lock(mu_, std::defer_lock);
    // Stopped: by el_cancel (EL_E_CANCELLED) or by timeout_ms (EL_E_TIMEOUT), `while` what.
    const auto stopped = [&](const char * while_) {
        fail(cancelled() ? EL_E_CANCELLED : EL_E_TIMEOUT, std::string(cancelled() ? "cancelled" : "timed out") + while_);
    };
    while (!lock.try_lock()) {
        if (stop()) {
            stopped(" waiting for another embed call");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    if (ctx_ == nullptr) {
        create();
    }
    const auto t0   = std::chrono::steady_clock::now();
    json       data = json::array();
    size_t     n_tokens = 0;
    for (size_t i = 0; i < inputs.size(); i++) {
        std::vector<float> vec = stop() ? std::vector<float>{} : pooled(inputs[i], normalize, stop);
        if (vec.empty()) {
            stopped(" while embedding");
        }
        json item = {{"index", i}, {"embedding", std::move(vec)}, {"n_tokens", inputs[i].tokens.size()}};
        if (inputs[i].truncated) {
            item["truncated"] = true;
        }
        data.push_back(std::move(item));
        n_tokens += inputs[i].tokens.size();
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return json{{"data", std::move(data)},      {"n_embd", llama_model_n_embd(model_)}, {"pooling", pooling_},
                {"normalized", normalize},      {"n_tokens", n_tokens},                {"ms_total", ms},
                {"abi_version", EL_ABI_VERSION}};
}

}  // namespace el
