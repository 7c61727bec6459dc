// speculation.h -- self-speculative decoding: drafting a continuation from n-grams the call's
// own context already holds (llama.cpp's common/ngram-map, "ngram-simple"), so that one decode
// step can verify several tokens, and the setting that turns it on.
//
// Invariant: speculation never changes what a call outputs. A draft is only offered where the
// next token is a deterministic function of the logits (temperature <= 0, so greedy or a
// grammar's greedy choice), every drafted token is checked by the call's own token choice at
// its row, in order, and the first that differs ends the draft: what follows it leaves the
// cache and its mirror before anything else runs on the slot. Off where the cache cannot be
// trimmed (sliding-window, recurrent and hybrid models: docs/reuse.md), with logprobs (one
// entry per token is computed on the one path), and on test hooks that force tokens. A call
// drafts only while it is the only call running on its handle (Engine::decode), so its drafts
// never lengthen a step another call waits for.
#pragma once

#include "json_args.h"
#include "llama.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace el {

// The "speculative" setting (el_open's default, each call's override).
struct Speculation {
    int32_t size_n = 0;  // n-gram looked up in the context; 0: off
    int32_t size_m = 0;  // most tokens drafted from what followed it
    bool    on() const { return size_n > 0; }
};

// "off" | "ngram-simple" | {"type": "off" | "ngram-simple", "size_n": 1..32, "size_m": 1..64};
// `what` names the setting in errors. The sizes default to kDefaultN and kDefaultM.
Speculation read_speculation(const json & value, const char * what);

constexpr int32_t kDefaultN = 4;
constexpr int32_t kDefaultM = 16;

// When a call drafts next, and how much. A drafted token is not free: each row of a step also
// attends over the whole context. qwen2.5-coder-0.5b on 2 cores at 2,048 tokens of context
// (llama-bench -d 2048, 2026-12-04): a step of 2 rows costs 1.18x one row, 4 rows 1.49x,
// 8 rows 2.4x. A long draft that fails at its first token therefore costs up to twice a plain
// step, and most drafts in an agent's replies fail early (a city's name, a number, then a
// stretch of copied text). So a call's first draft is at most kFirstDraft tokens; a draft
// accepted whole doubles the next one's length (up to size_m); one accepted in part sets it to
// one more than the part accepted (at least kFirstDraft); and after a draft of which nothing
// was accepted drafting pauses for 1, 2, 4 ... (at most 32) tokens, so text that does not
// repeat its context pays for few tries. make bench-speculative measures it.
constexpr size_t kFirstDraft = 2;

struct DraftPace {
    size_t length = kFirstDraft;  // the next draft's most tokens (size_m also bounds it)
    size_t pause  = 0;            // tokens to decode before the next draft
    size_t misses = 0;            // drafts in a row of which nothing was accepted

    // Whether to draft for this token (counts a paused one down).
    bool ready() {
        if (pause == 0) {
            return true;
        }
        pause--;
        return false;
    }
    void record(size_t drafted, size_t accepted);
};

// The draft to offer after `sampled`, from `history` (the tokens the cache holds: the prompt
// and what was generated), at most `limit` tokens; empty when no n-gram matches.
std::vector<llama_token> draft_tokens(const Speculation & s, const std::vector<llama_token> & history,
                                      llama_token sampled, size_t limit);

}  // namespace el
