// result.h -- the generated text read back as an assistant message, and the result
// JSON that el_generate returns (see el_shim.h for every field).
//
// Invariant: a result always carries what the model wrote: text the template's parser
// cannot read comes back as content rather than being lost, and every tool call has an id.
#pragma once

#include "chat.h"
#include "json_args.h"
#include "request.h"

#include <string>

namespace el {

// What one call measured, for the result's counters and timings.
struct CallReport {
    std::string finish_reason;
    bool        truncated = false;
    size_t      n_prompt = 0, n_reused = 0, n_decoded = 0;
    double      ms_prepare = 0, ms_template = 0, ms_reset = 0, ms_prefill = 0, ms_decode = 0;
    size_t      slot = 0;
    bool        routed = false;  // given a slot (false: cancelled before)
    bool        restored_from_host = false;
    json        logprobs = json::array();  // per generated token, when asked for
    json        probe;                     // test hook "probe": per position of the copy
};

// Parse the output with the template's parser (a final parse; if the text does not
// parse whole, as when a call is cut off by max_tokens, the partial parse that the
// streamed deltas showed), and recover a call written as JSON if the request allows it.
// Tool-call ids are left to the caller (DeltaStream::assign_ids).
common_chat_msg parse_output(const std::string & text, const Request & req);

// The el_generate result object.
json result_json(const common_chat_msg & msg, const CallReport & report, bool with_logprobs);

}  // namespace el
