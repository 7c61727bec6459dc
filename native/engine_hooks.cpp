// engine_hooks.cpp -- the test hooks that act inside a call's evaluation: "probe" (read what the
// model predicts over a copy of its prompt) and "corrupt" (plant one realistic fault in a reused
// prefix), each there so that a differential suite can show it would see such a fault. See
// test_hooks.h; compiled only with EL_TEST_HOOKS, like every hook.

#ifdef EL_TEST_HOOKS

#include "engine_call.h"

#include "compute_lane.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace el {

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
        if (const int32_t rc = on_compute_lane([this] { return llama_decode(ctx_, batch_); }); rc != 0) {
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
    if (req.corrupt == Corruption::Shift && !llama_memory_can_shift(llama_get_memory(ctx_))) {
        // llama.cpp would abort at the next decode (no K-shift for several positions per embedding)
        fail("test hook: this model's memory cannot shift positions");
    }
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

}  // namespace el

#endif  // EL_TEST_HOOKS
