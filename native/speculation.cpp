// speculation.cpp -- the "speculative" setting and drafting; see speculation.h (token_choice.cpp
// checks a draft with the call's own choice).

#include "speculation.h"

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

}  // namespace el
