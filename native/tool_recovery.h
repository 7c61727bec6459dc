// tool_recovery.h -- small models often write a tool call as JSON in the content
// instead of in their template's syntax; this turns such content into tool calls.
//
// Invariant: only content whose whole substance is one call, a list of calls or one
// call per line (bare or in a single ```json fence), each naming an offered tool with
// an arguments object, is recovered. Prose, code and unknown tools are left as text.
#pragma once

#include "chat.h"

#include <set>
#include <string>
#include <vector>

namespace el {

// True (and `out` filled) when `content` is such a call or list of calls.
bool recover_tool_calls(const std::string & content, const std::set<std::string> & names,
                        std::vector<common_chat_tool_call> & out);

// Could this content still become a recovered call? Used while streaming to
// hold such content back until the end, so that the deltas never show as text
// what the final result returns as a tool call.
bool may_become_tool_call(const std::string & content);

}  // namespace el
