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
// entry per token is computed on the one path), and on test hooks that force tokens.
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

// When a call drafts next, from how its drafts fared. On a CPU a batch of fewer than 8 rows
// is multiplied one row at a time (ggml's tiled kernels start at 8), so each drafted token
// costs about what decoding it alone would: an accepted one saves only the step's fixed cost,
// a rejected one costs a step. Drafts are therefore as long as the n-gram match allows
// (size_m), and after a draft of which less than half was accepted (a loss) drafting pauses
// for 1, 2, 4 ... (at most 32) tokens, so text that does not repeat its context pays for few
// tries.
struct DraftPace {
    size_t length = SIZE_MAX;  // the next draft's most tokens (size_m bounds it)
    size_t pause  = 0;  // tokens to decode before the next draft
    size_t misses = 0;  // drafts in a row of which nothing was accepted

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
