// request.cpp -- from the caller's JSON to a runnable Request; see request.h.
//
// The steps, in order, and the file that tells each: read the three JSON arguments and the
// options (request_options.cpp) and the test hooks (test_hooks.cpp); render the prompt with the
// model's chat template and tokenize it (rendering.cpp); choose the grammar (grammar_choice.cpp);
// check that the prompt fits, and place the checkpoints.

#include "request.h"

#include "grammar_choice.h"
#include "patched.h"
#include "rendering.h"
#include "request_options.h"
#include "speculation.h"
#include "test_hooks.h"

#include <string>

namespace el {

json prepared_json(const Request & r) {
    json triggers = json::array();
    for (const auto & t : r.sampling.grammar_triggers) {
        triggers.push_back({{"type", (int) t.type}, {"value", t.value}});
    }
    return {
        {"prompt", r.chat.prompt},
        {"generation_prompt", r.chat.generation_prompt},
        {"grammar", common_grammar_value(r.sampling.grammar)},
        {"grammar_lazy", r.sampling.grammar_lazy},
        {"grammar_triggers", triggers},
        {"last_message_start", r.last_message_start},
        {"generation_start", r.generation_start},
        {"tokens", r.prompt},  // the tokenizer's part (the special-token prefilter, the token cache)
    };
}

Request parse_request(const ModelView & m, const char * messages_json, const char * tools_json,
                      const char * options_json) {
    Request r;
    Inputs inputs = read_inputs(m.messages, m.cfg.scope, messages_json, tools_json, options_json);
    // renders run on this thread: what its loop memo counts meanwhile is this call's
    const uint64_t memo_hits = patched::render_memo_hits();
    const json & opt = inputs.opt;
    (void) get_string(opt, "session", "");  // a wrong type is refused, by name
    (void) get_string(opt, "scope", "");
    r.owner        = inputs.owner;
    if (r.owner.scope.size() > kMaxScope) {
        throw UserError("\"scope\" is longer than " + std::to_string(kMaxScope) + " bytes");
    }
    r.session      = r.owner.key();
    r.request_id   = get_string(opt, "request_id", "");
    if (r.request_id.size() > kMaxRequestId) {
        throw UserError("\"request_id\" is longer than " + std::to_string(kMaxRequestId) + " bytes");
    }
    r.cache_prompt = get_bool(opt, "cache_prompt", true);
    const json * spec = find(opt, "speculative");
    r.speculation     = spec != nullptr ? read_speculation(*spec, "speculative") : m.cfg.speculative;
    read_sampling(opt, m, read_test_hooks(opt, m.vocab, r), r);
    r.n_messages_reused = inputs.n_messages_reused;
    if (r.check_messages) {
        check_cached_messages(inputs.messages_text, inputs.messages);
    }

    const std::string named = read_tool_choice(opt, inputs.tools, r);
    const bool parallel     = get_bool(opt, "parallel_tool_calls", true);
    const bool forced       = r.tool_choice == ToolChoice::Required || r.tool_choice == ToolChoice::Named;
    const bool tools_active = !inputs.tools.empty() && r.tool_choice != ToolChoice::None;
    const json schema       = read_response_format(opt);
    const json narrowed     = read_grammar_tools(opt, named, r);
    const json & call_tools = narrowed.is_null() ? inputs.tools : narrowed;

    common_chat_templates_inputs in = render(m, inputs, parallel, tools_active, r);
    if (!narrowed.is_null() && tools_active) {
        grammar_from_tools(m, in, narrowed, r);
    }
    if (tools_active && !m.chat.supports_tools) {
        r.warnings.push_back("tools were given, but this model's chat template (" + m.chat.source +
                             ") does not show tools to the model: it cannot know them (give a chat_template "
                             "that renders tools, or use a model whose template does)");
    }
    choose_grammar(m.vocab, call_tools, named, parallel, forced, tools_active, schema, r);
    set_greedy(m.vocab, r);
    // Forced calls, and calls beside a response_format, are written as JSON by construction;
    // recovery is how they are read.
    r.recover = forced || (tools_active && (r.recover || !schema.is_null()));

    // A prompt that cannot fit is refused before it is tokenized (a multi-megabyte request
    // would take a core for seconds): the same error, with the bound instead of the count.
    if (const size_t at_least = m.tokens.min_tokens(r.chat.prompt); at_least >= (size_t) m.n_ctx) {
        fail(EL_E_CONTEXT_FULL, "prompt is at least " + std::to_string(at_least) + " tokens; the context holds " + std::to_string(m.n_ctx) +
             " (raise n_ctx in the config or shorten the conversation)");
    }
    r.prompt = tokens_of(m, r.chat.prompt, r);
    if (r.prompt.empty()) {
        fail("the rendered prompt is empty");
    }
    if (m.wants_checkpoints && in.add_generation_prompt && !r.chat.generation_prompt.empty() &&
        r.chat.prompt.size() >= r.chat.generation_prompt.size() &&
        r.chat.prompt.compare(r.chat.prompt.size() - r.chat.generation_prompt.size(), std::string::npos,
                              r.chat.generation_prompt) == 0) {
        // Where the reply's turn opens: a template that renders an earlier reply otherwise than
        // it prompted for it (Qwen3.5 and other reasoning templates drop its <think> block)
        // diverges from the previous prompt right there on the next call. Read off the prompt's
        // own tokens, so before last_message_start, which may tokenize the history.
        const size_t at = r.chat.prompt.size() - r.chat.generation_prompt.size();
        const size_t n  = m.tokens.tokens_before(r.session, r.chat.prompt, at);
        r.generation_start = n == SIZE_MAX ? 0 : n;
    }
    if (m.wants_checkpoints && in.messages.size() > 1) {  // after: it may tokenize the history
        r.last_message_start = last_message_start(m, in, r);
    }
    if ((int32_t) r.prompt.size() >= m.n_ctx) {
        fail(EL_E_CONTEXT_FULL, "prompt is " + std::to_string(r.prompt.size()) + " tokens; the context holds " +
             std::to_string(m.n_ctx) + " (raise n_ctx in the config or shorten the conversation)");
    }
    r.n_render_reused = patched::render_memo_hits() - memo_hits;
    // unaltered (common/ reads its inputs as const): the session's next read keeps what it repeats
    r.read_messages = std::move(in.messages);
    return r;
}

RequestCaches::~RequestCaches() {
    if (!accepted_) {
        m_.messages.rollback();
        m_.tokens.rollback();
    }
}

void RequestCaches::accept(Request & r) {
    accepted_ = true;
    m_.messages.commit();
    m_.tokens.commit();
    m_.messages.give_back(r.session, std::move(r.read_messages), std::move(r.read_message_ids));
}

}  // namespace el
