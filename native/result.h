// result.h -- the generated text read back as an assistant message, and the result
// JSON that el_generate returns (see el_shim.h for every field).
//
// Invariant: a result always carries what the model wrote: text the template's parser
// cannot read comes back as content rather than being lost, and every tool call has an id.
#pragma once

#include "chat.h"
#include "json_args.h"
#include "request.h"
#include "tool_recovery.h"

#include <string>

namespace el {

// What one call measured, for the result's counters and timings.
struct CallReport {
    std::string finish_reason;
    bool        truncated = false;
    size_t      n_prompt = 0, n_reused = 0, n_decoded = 0;
    double      ms_prepare = 0, ms_template = 0, ms_reset = 0, ms_prefill = 0, ms_decode = 0;
    double      ms_tokenize = 0, ms_sampler = 0;
    size_t      n_tokenize_reused = 0;
    size_t      n_render_reused   = 0;
    size_t      n_messages_reused = 0;
    size_t      slot = 0;
    size_t      n_batched_max = 0;  // most calls in one of this call's decode steps
    size_t      n_argmax      = 0;  // tokens chosen by the greedy fast path (token_choice.cpp)
    size_t      n_drafted     = 0;  // tokens offered by self-speculation (speculation.h)
    size_t      n_accepted    = 0;  // of those, the ones the call's own choice confirmed
    bool        routed = false;  // given a slot (false: cancelled before)
    bool        restored_from_host = false;
    bool        shared_prefix      = false;
    bool        restored_from_disk = false;  // the slot started from a disk-tier entry  // the slot started from a copy of another conversation of the scope
    json        logprobs = json::array();  // per generated token of the output, when asked for
    json        logprobs_end;              // the end-of-generation token's entry (null: none)
    std::vector<std::string> warnings;     // the request's (Request::warnings)
#ifdef EL_TEST_HOOKS
    json        probe;                     // test hook "probe": per position of the copy
#endif
};

// The output read back: the assistant message, and the calls it wrote whose
// arguments do not match their tool's schema (never among msg.tool_calls).
struct ParsedOutput {
    common_chat_msg          msg;
    std::vector<InvalidCall> invalid;
};

// Parse the output with the template's parser (a final parse; if the text does not
// parse whole, as when a call is cut off by max_tokens, the partial parse that the
// streamed deltas showed), set aside calls that fail their schema, and recover a call
// written as JSON if the request allows it. A turn that ended at a limit (`at_limit`:
// max_tokens or a full context) may end inside a call: its calls are returned as
// written, as the stream showed them, not judged against their schema. `assign_ids`
// gives the parsed calls the ids
// the stream announced (DeltaStream::assign_ids), before any is set aside; calls still
// without an id (recovered ones) get one from `new_id`.
ParsedOutput parse_output(const std::string & text, const Request & req, bool at_limit,
                          const std::function<void(common_chat_msg &)> & assign_ids,
                          const std::function<std::string()> & new_id);

// The el_generate result object.
json result_json(const ParsedOutput & out, const CallReport & report, bool with_logprobs);

}  // namespace el
