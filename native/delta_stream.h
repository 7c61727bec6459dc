// delta_stream.h -- what a streaming caller sees while the model writes: OpenAI-style
// deltas, stop strings found in the raw text, and text held back until it is safe.
//
// Invariant: the deltas sent, concatenated, are always a prefix of the final result's
// content, reasoning and tool calls (and equal to them after the final update): text
// that may still turn out to be a stop string, an incomplete UTF-8 sequence or a
// recovered tool call is held back rather than sent and taken back.
#pragma once

#include "chat.h"
#include "el_shim.h"
#include "json_args.h"

#include <functional>
#include <string>
#include <vector>

namespace el {

// Where the text of a stop string starts, if it has appeared; else how many
// trailing bytes could still be the start of one and must be held back.
struct StopScan {
    size_t found = std::string::npos;
    size_t hold  = 0;
};

// Only matches starting at or after `from` are looked for: the caller passes the first
// position a newly appended piece can complete (the old length less the longest stop
// string, plus one), so a generation's scans cost O(new text), not O(text) per token.
StopScan scan_stops(const std::string & text, size_t from, const std::vector<std::string> & stops);

// Length of the longest prefix of s that does not end inside a UTF-8 sequence.
size_t utf8_complete_prefix(const std::string & s);

// Emits OpenAI-style deltas: the difference between what was sent so far and
// the newest parse of the output. Content that may yet turn out to be a
// recovered tool call is held back until the end.
class DeltaStream {
  public:
    DeltaStream(el_stream_cb cb, void * user_data, bool hold_json, std::function<std::string()> new_id)
        : cb_(cb), user_data_(user_data), hold_json_(hold_json), new_id_(std::move(new_id)) {}

    // Returns false when the callback asked to stop.
    bool update(common_chat_msg msg, bool final);

    // The call's per-token logprobs (grown by the decode loop on this thread): each delta
    // sent carries those of the tokens decoded since the previous one, so that a client
    // has a token's logprob with its text; the concatenation is a prefix of the result's.
    void with_logprobs(const json * logprobs) { logprobs_ = logprobs; }

    // Give the message's tool calls that have no id the ids already announced for them,
    // by position, and new ids to calls not seen before: the first delta of a call and
    // the final result carry the same id. Calls that have an id keep it.
    void assign_ids(common_chat_msg & msg);

    // {"prompt_progress": {"processed", "total"}}: prompt tokens evaluated so far
    // (not counting those reused from the cache). Returns false when the callback asked to
    // stop, as update() does: the call then ends "cancelled" before its next prompt chunk.
    bool progress(size_t processed, size_t total);

    // The prompt's size and what of it the cache held, known once the call's slot was prepared:
    // the next delta sent (text or progress) carries {"prompt": {"n_prompt", "n_reused"}} once,
    // so that a client can report the input before the output ends (Anthropic's message_start).
    void set_prompt(size_t n_prompt, size_t n_reused) {
        prompt_ = json{{"n_prompt", n_prompt}, {"n_reused", n_reused}};
    }

  private:
    json with_prompt(json delta);  // the delta, with the prompt's counts if not sent yet

    el_stream_cb    cb_;
    void *          user_data_;
    bool            hold_json_;
    std::function<std::string()> new_id_;
    std::vector<std::string>     ids_;
    common_chat_msg sent_;
    const json *    logprobs_      = nullptr;
    size_t          logprobs_sent_ = 0;
    json            prompt_;  // null: not known yet, or sent
};

}  // namespace el
