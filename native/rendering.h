// rendering.h -- the prompt a request's messages and tools make, by the model's own chat template
// (llama.cpp's common/chat), its tokens, and where its last message and reply turn start.
//
// Invariant: the prompt is exactly what the template renders for these messages, tokenized as
// a whole would be (the token cache only skips what it already tokenized); a template's error
// is the request's, never the handle's.
#pragma once

#include "request_options.h"

#include <string>
#include <vector>

namespace el {

// The model's template applied to `in`, sharing the handle's message values where it can.
common_chat_params apply_template(const ModelView & m, common_chat_templates_inputs & in);

// Render the prompt, and set up the output parser and the stop strings; returns the inputs the
// render took (the messages moved out of `inputs`).
common_chat_templates_inputs render(const ModelView & m, Inputs & inputs, bool parallel, bool tools_active,
                                    Request & r);

// The grammar of the call's tool calls built from `tools` (the option grammar_tools) rather than
// from the tools the prompt shows: the template applied again to the same inputs with them, its
// tool-call grammar, laziness, triggers and preserved tokens taking the render's place in r.chat.
// The prompt, the output parser and the stops stay the render's.
void grammar_from_tools(const ModelView & m, const common_chat_templates_inputs & in, const json & tools, Request & r);

// The tokens of a rendered text, from the handle's token cache.
std::vector<llama_token> tokens_of(const ModelView & m, const std::string & text, Request & r);

// Where the last message starts, in tokens (0: unknown).
size_t last_message_start(const ModelView & m, const common_chat_templates_inputs & in, Request & r);

}  // namespace el
