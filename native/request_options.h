// request_options.h -- reading el_generate's three JSON arguments into a Request: the messages
// and tools (through the handle's message cache), and every option but the test hooks.
//
// Invariant: every option is checked here, by name, before anything is rendered: a wrong type,
// an out-of-range value or a key the options do not have is an error naming it.
#pragma once

#include "request.h"

#include <optional>
#include <string>
#include <vector>

namespace el {

// The three arguments as read.
struct Inputs {
    const char *                 messages_text = nullptr;  // as the caller sent it
    std::vector<common_chat_msg> messages;                 // as common/ reads them
    size_t                       n_messages_reused = 0;    // of them, taken from the handle's cache
    std::vector<uint64_t>        message_ids;              // their numbers in the cache (empty: whole read)
    json                         tools;
    json                         opt;
    Owner                        owner;  // its "scope" and "session" (read_owner)
};

// Read the messages (from `cache` where it holds them), the tools and the options; the options'
// keys are checked, their values are read by the functions below.
Inputs read_inputs(MessageCache & cache, const std::optional<std::string> & default_scope, const char * messages_json,
                   const char * tools_json, const char * options_json);

// Sampling, limits, logprobs, logit bias and stop strings.
void read_sampling(const json & opt, const ModelView & m, int32_t max_top_logprobs, Request & r);

// tool_choice, and the tools' names and schemas; returns the named function, if one is named.
std::string read_tool_choice(const json & opt, const json & tools, Request & r);

// grammar_tools: the tools a call's grammar is built from instead of `tools` (each one of them by
// name, typically with narrower argument schemas, and the named tool_choice among them); null when
// absent. The prompt shows `tools`. After read_tool_choice, whose tool names and choice it reads.
json read_grammar_tools(const json & opt, const std::string & named, const Request & r);

// response_format; returns the schema the output must match, or null.
json read_response_format(const json & opt);

}  // namespace el
