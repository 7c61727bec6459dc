// token_choice.cpp -- the token that follows an evaluation, for one call: a forced one
// (test hooks), the argmax (the greedy fast path), or the sampler's choice; and its
// logprobs; and the check of a speculative draft by that same choice. See engine.h.
//
// Invariant: a token is chosen from the logits row of the call's own last evaluation,
// under the handle's mutex, before any later batch can overwrite that row; greedy choice
// without a grammar reads the logits directly and picks exactly what the full sampler
// chain would.

#include "engine_call.h"

#include "common.h"
#include "speculation.h"

#include <algorithm>
#include <cmath>

namespace el {

// The most likely next token after the request's biases, read straight from the logits
// of the last evaluation (the greedy fast path: no candidate array, no sort). The tokens
// without a bias are scanned in order, run by run between the biased ones (greedy_bias is
// sorted by token and checked against the vocabulary), so the first maximum wins as in one
// scan; then the biased tokens compete with their biased logits.
llama_token Engine::argmax_token(const Request & req, int32_t row) const {
    llama_synchronize(ctx_);
    const float * logits = llama_get_logits_ith(ctx_, row);
    const int32_t n_vocab = llama_vocab_n_tokens(vocab_);
    llama_token best = 0;
    float best_logit = -INFINITY;
    int32_t from = 0;
    auto scan_to = [&](int32_t to) {
        for (int32_t i = from; i < to; i++) {
            if (logits[i] > best_logit) {
                best_logit = logits[i];
                best       = i;
            }
        }
    };
    for (const auto & b : req.greedy_bias) {
        scan_to(b.first);
        from = b.first + 1;
    }
    scan_to(n_vocab);
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

// A response_format beside tools: the model's own first choice decides between a call and
// an answer. A first token (unconstrained argmax) that may open a call -- a control token
// (qwen's <tool_call>), whitespace, or text starting with { [ ` or < -- keeps the
// call-or-answer grammar; any other means the model meant to answer in text, and the
// schema's grammar takes over, so that the answer is the schema's JSON.
void Engine::route_first_token(Prepared & p, int32_t row) {
    const llama_token tok   = argmax_token(p.req, row);
    const std::string piece = common_token_to_piece(vocab_, tok, true);
    const size_t      first = piece.find_first_not_of(" \t\r\n");
    const bool opener = llama_vocab_is_control(vocab_, tok) || first == std::string::npos ||
                        std::string("{[`<").find(piece[first]) != std::string::npos;
    if (!opener) {
        p.sampler = std::move(p.answer_sampler);
    }
    p.answer_sampler.reset();
}

// The token that follows the last evaluation, from row `row` of its logits (-1: the
// last row): a forced one (test hooks), the argmax, or the sampler's choice.
void Engine::choose_next(Prepared & p, int32_t row) {
    const Request & req = p.req;
    const size_t    n   = p.rep.n_decoded;
    if (p.answer_sampler && n >= req.forced.size()) {
        route_first_token(p, row);
    }
    llama_token     tok;
    bool            argmax = false;
    if (n < req.forced.size()) {
        tok = req.forced[n];
        if (!req.forced_only) {
            common_sampler_accept(p.sampler.get(), tok, true);  // sampling goes on after them
        }
    } else if (req.forced_only) {
        p.have_next = false;  // the forced text ends as if the model ended it
        return;
    } else if (req.greedy) {
        // what common_sampler_sample would pick: there is no grammar (request.cpp, set_greedy)
        tok = argmax_token(req, row);
        common_sampler_accept(p.sampler.get(), tok, true);
        argmax = true;
    } else {
        tok = common_sampler_sample(p.sampler.get(), ctx_, row);
        common_sampler_accept(p.sampler.get(), tok, true);
    }
    p.have_next   = true;
    p.next        = tok;
    p.next_argmax = argmax;
    if (req.top_logprobs >= 0) {
        p.next_logprob = logprob_entry(llama_get_logits_ith(ctx_, row), tok, req.top_logprobs);
    }
}

// Whether this call may be offered drafts (the invariant's conditions, in speculation.h).
bool Engine::may_speculate(const Prepared & p) const {
    return p.req.speculation.on() && p.call.cache->trimmable() && p.req.sampling.temp <= 0 &&
           p.req.top_logprobs < 0 && p.req.forced.empty() && !p.answer_sampler;
}

// After a step evaluated the call's token and its draft (rows row .. row + draft.size()):
// choose the next token at each row in order, as without a draft; while it is the drafted
// token, that token is accepted (queued for the decode loop to turn into text) and the next
// row is read. The rest of the draft leaves the cache and the mirror here, under the mutex.
void Engine::check_draft(Prepared & p, const std::vector<llama_token> & draft, int32_t row) {
    size_t k = 0;
    for (;; k++) {
        choose_next(p, row + (int32_t) k);
        if (k == draft.size() || !p.have_next || p.next != draft[k]) {
            break;
        }
        p.accepted.push_back({p.next, p.next_argmax});
    }
    p.rep.n_accepted += k;
    p.pace.record(draft.size(), k);
    if (const size_t rejected = draft.size() - k; rejected > 0) {
        if (!p.call.cache->drop_last(rejected)) {
            throw std::runtime_error("could not remove a rejected draft from the cache");
        }
    }
}

}  // namespace el
