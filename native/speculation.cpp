// speculation.cpp -- the "speculative" setting, drafting, and the engine's check of a draft.
// See speculation.h.

#include "speculation.h"

#include "engine.h"
#include "engine_call.h"
#include "ngram-map.h"

#include <algorithm>

namespace el {

Speculation read_speculation(const json & value, const char * what) {
    const std::string name = std::string("\"") + what + "\"";
    const auto        type = [&](const std::string & t) {
        if (t != "off" && t != "ngram-simple") {
            fail(name + " must be \"off\" or \"ngram-simple\" (or an object with \"type\", \"size_n\", \"size_m\")");
        }
        return t == "ngram-simple";
    };
    Speculation s;
    if (value.is_string()) {
        if (type(value.get<std::string>())) {
            s = {kDefaultN, kDefaultM};
        }
        return s;
    }
    if (!value.is_object()) {
        fail(name + " must be a string or an object");
    }
    reject_unknown_keys(value, {"type", "size_n", "size_m"}, what);
    if (!type(get_string(value, "type", "ngram-simple"))) {
        return s;
    }
    try {
        s.size_n = (int32_t) get_int(value, "size_n", kDefaultN, 1, 32);
        s.size_m = (int32_t) get_int(value, "size_m", kDefaultM, 1, 64);
    } catch (const Error & e) {
        fail(e.code, name + ": " + e.what());
    }
    return s;
}

std::vector<llama_token> draft_tokens(const Speculation & s, const std::vector<llama_token> & history,
                                      llama_token sampled, size_t limit) {
    if (!s.on() || limit == 0) {
        return {};
    }
    const common_ngram_simple_config config{(uint16_t) s.size_n, (uint16_t) s.size_m};
    std::vector<llama_token>        draft = common_ngram_simple_draft(config, history, sampled);
    if (draft.size() > limit) {
        draft.resize(limit);
    }
    return draft;
}

void DraftPace::record(size_t drafted, size_t accepted) {
    if (accepted == drafted) {
        length = std::min<size_t>(64, 2 * length);  // never 0 (at least kFirstDraft); size_m bounds it further
        misses = 0;
        return;
    }
    length = std::max(kFirstDraft, accepted + 1);
    if (accepted > 0) {
        misses = 0;
        return;
    }
    pause = std::min<size_t>(32, size_t(1) << std::min<size_t>(misses, 5));
    misses++;
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
