// request.h -- one el_generate request turned into what llama.cpp needs: the rendered
// and tokenized prompt, the sampler settings, the grammar and the output parser.
//
// Invariant: parse_request either returns a Request that can run as is (every option
// checked, the prompt rendered by the model's own template, the grammar built, the
// prompt known to fit the context) or throws before anything on the handle changed.
#pragma once

#include "chat.h"
#include "config.h"
#include "prompt_cache.h"
#include "sampling.h"

#include "json_args.h"

#include <map>
#include <set>
#include <string>
#include <vector>

namespace el {

enum class ToolChoice { Auto, None, Required, Named };

struct Request {
    common_chat_params           chat;           // rendered prompt, parser, tool grammar
    common_chat_parser_params    parser;
    common_params_sampling       sampling;
    std::vector<llama_token>     prompt;
    std::vector<std::string>     stops;
    std::set<std::string>        tool_names;
    std::map<std::string, json>  tool_params;    // each tool's parameter schema, to check calls
    ToolChoice                   tool_choice = ToolChoice::Auto;
    bool                         recover     = true;
    int32_t                      max_tokens  = 0;
    int32_t                      top_logprobs = -1;  // -1: no logprobs
    double                       timeout_ms   = 0;
    bool                         cache_prompt = true;
    std::string                  session;                 // pin the conversation to a slot
    size_t                       last_message_start = 0;  // tokens before the last message (0: unknown)
    double                       ms_template = 0;         // rendering the chat template
    // test hooks (options key "_test", compiled with EL_TEST_HOOKS)
    UnsafeReuse                  unsafe_reuse       = UnsafeReuse::None;
    bool                         fail_after_prefill = false;
    bool                         device_lost        = false;  // llama_decode reports a fatal backend error
    bool                         has_canned_output  = false;  // parse this text instead of sampling
    std::string                  canned_output;
};

// What parsing a request needs to know about the open model.
struct ModelView {
    const Config &                cfg;
    const llama_vocab *           vocab;
    const common_chat_templates * templates;
    int32_t                       n_ctx;              // tokens per slot
    bool                          wants_checkpoints;  // place the last-message checkpoint
};

Request parse_request(const ModelView & model, const char * messages_json, const char * tools_json,
                      const char * options_json);

}  // namespace el
