// request.h -- one el_generate request turned into what llama.cpp needs: the rendered
// and tokenized prompt, the sampler settings, the grammar and the output parser.
//
// Invariant: parse_request either returns a Request that can run as is (every option
// checked, the prompt rendered by the model's own template, the grammar built, the
// prompt known to fit the context) or throws; what it added to the message and token
// caches is pending until the caller accepts the request (RequestCaches), so a request
// refused at any step before it runs leaves them as they were.
#pragma once

#include "chat.h"
#include "config.h"
#include "message_cache.h"
#include "patched.h"
#include "prompt_cache.h"
#include "sampling.h"
#include "token_cache.h"

#include "json_args.h"
#include "test_hooks.h"

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace el {

enum class ToolChoice { Auto, None, Required, Named };

constexpr size_t kMaxRequestId = 256;  // bytes of the "request_id" option
constexpr size_t kMaxScope     = 256;  // bytes of the "scope" option

// Bounds on the caller's stop strings (OpenAI allows four): each generated token is
// checked against them, so their number and length are bounded, and only the tail of
// the text that a new token can complete is scanned.
constexpr size_t kMaxStops      = 16;
constexpr size_t kMaxStopLength = 1024;

// A request ready to run; the test hooks it asked for (none in a release build) are its base.
struct Request : TestHooks {
    common_chat_params           chat;           // rendered prompt, parser, tool grammar
    common_chat_parser_params    parser;
    common_params_sampling       sampling;
    std::vector<llama_token>     prompt;
    std::vector<std::string>     stops;          // the caller's (bounded) and the template's
    size_t                       max_stop_len = 0;
    std::set<std::string>        tool_names;
    std::map<std::string, json>  tool_params;    // each tool's parameter schema, to check calls
    ToolChoice                   tool_choice = ToolChoice::Auto;
    bool                         recover     = true;
    int32_t                      max_tokens  = 0;
    int32_t                      top_logprobs = -1;  // -1: no logprobs
    double                       timeout_ms   = 0;
    // A response_format beside tools: the schema's own grammar, which replaces the call-or-
    // answer grammar when the first token the model would write unconstrained cannot open a
    // call (token_choice.cpp): forced to open with "{", small models write a call every time.
    std::string                  answer_grammar;
    bool                         greedy       = false;  // the sampler's choice is the argmax of the biased logits: no grammar
    std::vector<std::pair<llama_token, float>> greedy_bias;  // per token, summed: logit_bias and suppressed tokens
    bool                         cache_prompt = true;
    Speculation                  speculation;  // drafts offered (speculation.h); the handle's default
    std::string                  session;                 // the owner's key() (owner.h): the request caches' key
    Owner                        owner;                   // option "scope" and "session": whose slot and state
    std::string                  request_id;              // el_cancel_request stops the call by it
    std::vector<std::string>     warnings;                // what the call should know went otherwise than asked
    bool                         ignore_eos = false;      // to max_tokens: no end token, no fallback marker ends it
    size_t                       last_message_start = 0;  // tokens before the last message (0: unknown)
    size_t                       generation_start   = 0;  // tokens before the generation prompt (0: unknown)
    bool                         last_message_rendered = false;  // placed by rendering the history again
    std::string                  history_prompt;                 // that render, for the prepare_only hook
    std::string                  last_message_text;       // what the render's loop output for it (may be empty)
    // the messages as read, with their numbers in the message cache, for its give_back
    std::vector<common_chat_msg> read_messages;
    std::vector<uint64_t>        read_message_ids;
    double                       ms_template = 0;         // rendering the chat template
    size_t                       n_render_reused = 0;     // template loop iterations taken from earlier renders
    size_t                       n_messages_reused = 0;   // messages read from the handle's cache
    TokenCache::Stats            tokenizing;              // prompt tokens taken from the cache, time spent
};

// The chat template a handle renders with, as el_stats reports it: whose it is, and what the
// template can show the model (llama.cpp's probe of it, common/jinja/caps.h).
struct TemplateInfo {
    std::string source = "model";  // "model" (the GGUF's), "config" (chat_template), "chatml fallback"
    bool        supports_tools       = true;  // tools given to a call appear in its prompt
    bool        supports_system_role = true;
    // The ChatML fallback on a model that never learnt it writes its markers as plain text: a
    // reply ends at them (stop strings), rather than going on to invent the next turn.
    bool fallback() const { return source == "chatml fallback"; }
};

// What parsing a request needs to know about the open model.
struct ModelView {
    const Config &                cfg;
    const TemplateInfo &          chat;
    const llama_vocab *           vocab;
    const common_chat_templates * templates;
    int32_t                       n_ctx;              // tokens per slot
    bool                          wants_checkpoints;  // place the last-message checkpoint
    TokenCache &                  tokens;             // the handle's recent prompts and their tokens
    MessageCache &                messages;           // the handle's recently read messages
    // each message's chat-template value kept between calls (native/patches/
    // common-shared-message-values.patch); null once the template was seen to write to one
    std::shared_ptr<common_chat_msg_values> & message_values;
};

// What a prepared request would feed the engine, for the prepare_only test hook: the rendered
// prompt, the generation prompt the parser expects, the grammar and its triggers, and where
// the last message starts. Tests compare it with a from-scratch render.
json prepared_json(const Request & r);

Request parse_request(const ModelView & model, const char * messages_json, const char * tools_json,
                      const char * options_json);

// The request caches' side of one request: rolled back on destruction unless accept()ed,
// which commits them and gives the read messages back to the message cache.
class RequestCaches {
  public:
    explicit RequestCaches(const ModelView & m) : m_(m) {}
    ~RequestCaches();
    void accept(Request & r);
    RequestCaches(const RequestCaches &) = delete;
    RequestCaches & operator=(const RequestCaches &) = delete;

  private:
    const ModelView & m_;
    bool              accepted_ = false;
};

}  // namespace el
