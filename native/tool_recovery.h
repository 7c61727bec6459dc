// tool_recovery.h -- small models often write a tool call as JSON in the content
// instead of in their template's syntax; this turns such content into tool calls, and
// checks every call against its tool's schema.
//
// Invariant: only content whose whole substance is one call, a list of calls or one
// call per line (bare or in a single ```json fence), each naming an offered tool with
// an arguments object, is recovered; an unterminated last value (the output ran out)
// is dropped when complete calls precede it. Prose, code and unknown tools are left as
// text. A call whose arguments do not match its tool's schema is never returned as a
// valid call: it is reported as invalid, with the reason.
#pragma once

#include "chat.h"
#include "json_args.h"

#include <map>
#include <string>
#include <vector>

namespace el {

// A call the model wrote whose arguments fail its tool's schema.
struct InvalidCall {
    std::string id;
    std::string name;
    std::string arguments;  // as written (JSON text)
    std::string error;      // why it does not match ("arguments.to_unit must be one of ...")
};

// Offered tools: name -> parameter schema.
using ToolSchemas = std::map<std::string, json>;

// True (and `valid`/`invalid` filled) when `content` is such a call or list of calls.
// Exact repeats of a call are kept once.
bool recover_tool_calls(const std::string & content, const ToolSchemas & tools,
                        std::vector<common_chat_tool_call> & valid, std::vector<InvalidCall> & invalid);

// Move the calls whose arguments fail their (offered) tool's schema from `calls` to
// `invalid`; calls to tools not offered are left where they are.
void check_tool_calls(std::vector<common_chat_tool_call> & calls, const ToolSchemas & tools,
                      std::vector<InvalidCall> & invalid);

// Could this content still become a recovered call? Used while streaming to
// hold such content back until the end, so that the deltas never show as text
// what the final result returns as a tool call.
bool may_become_tool_call(const std::string & content);

}  // namespace el
