// rendering.cpp -- the prompt rendered and tokenized; see rendering.h.

#include "rendering.h"

#include "patched.h"
#include "test_hooks.h"
#include "timing.h"

#include <algorithm>

namespace el {

// Sharing the handle's message values (null: not): a
// render that fails with them is done again without: a template that writes to a message
// cannot share them (the shared values refuse writes), and once an unshared render succeeds
// where the shared one failed, the handle stops sharing. Otherwise the error is the request's.
common_chat_params apply_template(const ModelView & m, common_chat_templates_inputs & in) {
    if (!patched::shares_message_values(in)) {
        return common_chat_templates_apply(m.templates, in);
    }
    try {
        return common_chat_templates_apply(m.templates, in);
    } catch (const std::exception &) {
        patched::stop_sharing_message_values(in);
        patched::watch_last_message();  // what the failed render recorded is not this one's
    }
    common_chat_params chat = common_chat_templates_apply(m.templates, in);
    m.message_values        = nullptr;
    return chat;
}

common_chat_templates_inputs render(const ModelView & m, Inputs & inputs, bool parallel, bool tools_active,
                                    Request & r) {
    common_chat_templates_inputs in;
    in.messages = std::move(inputs.messages);
    patched::set_message_ids(in, inputs.message_ids);  // the template's values taken by number
    r.read_message_ids = std::move(inputs.message_ids);
    try {
        in.tools = common_chat_tools_parse_oaicompat(common_json::parse(dump(inputs.tools)));
    } catch (const std::exception & e) {
        fail(e.what());
    }
    in.tool_choice         = r.tool_choice == ToolChoice::None ? COMMON_CHAT_TOOL_CHOICE_NONE : COMMON_CHAT_TOOL_CHOICE_AUTO;
    in.parallel_tool_calls = parallel;
    in.reasoning_format    = COMMON_REASONING_FORMAT_AUTO;
    in.add_bos             = llama_vocab_get_add_bos(m.vocab);
    in.add_eos             = llama_vocab_get_add_eos(m.vocab);
    patched::want_parser_object(in);  // the output parser as an object, not saved to be loaded back
    patched::share_message_values(in, m.message_values, r.session);  // a session never takes another's values
    if (in.messages.back().role == "assistant") {
        // Continue a partial assistant message rather than open a new one.
        in.add_generation_prompt  = false;
        in.continue_final_message = COMMON_CHAT_CONTINUATION_AUTO;
    }
    const auto t_template = steady::now();
    patched::watch_last_message();
    try {
        r.chat = apply_template(m, in);
    } catch (const std::exception & e) {
        patched::watch_last_message();
        fail(std::string("chat template failed: ") + e.what());
    }
    r.last_message_text = patched::watched_last_message();  // the render's loop output for the last message
    r.ms_template = ms_since(t_template);

    r.parser = common_chat_parser_params(r.chat);
    r.parser.reasoning_format = COMMON_REASONING_FORMAT_AUTO;
    r.parser.parse_tool_calls = tools_active;
    r.parser.is_continuation  = in.continue_final_message != COMMON_CHAT_CONTINUATION_NONE;
    // handed over as an object (common-return-parser-object), there is nothing to load
    if (!patched::take_parser_object(r.chat, r.parser) && !r.chat.parser.empty()) {
        // A template handled by its own code in common/parsers (Gemma 4, Qwen3-Coder and
        // Qwen3.5, ...) hands its parser over saved, whatever was asked, as does every template
        // without common-return-parser-object; unloaded, the output would be read as plain
        // content (tool calls and reasoning unparsed).
        try {
            r.parser.parser.load(r.chat.parser);
        } catch (const std::exception & e) {
            fail(std::string("chat template's output parser does not load: ") + e.what());
        }
    }
    for (const auto & stop : r.chat.additional_stops) {
        r.stops.push_back(stop);
    }
    if (m.chat.fallback() && !r.ignore_eos) {
        r.stops.insert(r.stops.end(), {"<|im_end|>", "<|im_start|>"});
    }
    for (const auto & stop : r.stops) {
        r.max_stop_len = std::max(r.max_stop_len, stop.size());
    }
    return in;
}

// Why a second render rather than a grammar of our own: the template's grammar is the one its
// parser reads (qwen's <tool_call>, Gemma 4's, a PEG template's), with its triggers; only the
// template knows it. Why the prompt stays the first render's: the tools a model is shown decide
// which tool it picks (shown narrowed schemas, qwen2.5-coder-0.5b picked another tool), and a
// prompt that changes with the choices would lose the cached prefix every turn.
void grammar_from_tools(const ModelView & m, const common_chat_templates_inputs & in, const json & tools, Request & r) {
    common_chat_templates_inputs again = in;
    try {
        again.tools = common_chat_tools_parse_oaicompat(common_json::parse(dump(tools)));
    } catch (const std::exception & e) {
        fail(std::string("grammar_tools: ") + e.what());
    }
    const auto t_template = steady::now();
    common_chat_params chat;
    try {
        chat = apply_template(m, again);
    } catch (const std::exception & e) {
        fail(std::string("chat template failed on grammar_tools: ") + e.what());
    }
    r.ms_template += ms_since(t_template);
    r.chat.grammar          = std::move(chat.grammar);
    r.chat.grammar_lazy     = chat.grammar_lazy;
    r.chat.grammar_triggers = std::move(chat.grammar_triggers);
    r.chat.preserved_tokens = std::move(chat.preserved_tokens);
}

// The tokens of a rendered text, from the handle's token cache (only what is new in it is
// tokenized); with the check_tokens test hook, compared with a tokenization from scratch.
std::vector<llama_token> tokens_of(const ModelView & m, const std::string & text, Request & r) {
    std::vector<llama_token> toks = m.tokens.tokenize(r.session, text, &r.tokenizing, r.tokens_ignore_edits);
    if (r.check_tokens) {
        const std::vector<llama_token> full = tokenize_prompt(m.vocab, text);
        if (toks != full) {
            fail("test hook check_tokens: the cached tokenization differs from a full one at token " +
                 std::to_string(common_prefix(toks, full)) + " of " + std::to_string(full.size()));
        }
    }
    return toks;
}

namespace {

// How many leading tokens of `prompt` render every message but the last: the
// template applied to the history alone, tokenized, matched against the prompt.
size_t history_length(const ModelView & m, common_chat_templates_inputs in, Request & r) {
    r.last_message_rendered = true;
    in.messages.pop_back();
    patched::drop_last_message_id(in);
    in.add_generation_prompt  = false;
    in.continue_final_message = COMMON_CHAT_CONTINUATION_NONE;
    patched::prompt_only(in);  // one render (native/patches/common-render-faster.patch)
    std::vector<llama_token> history;
    try {
        r.history_prompt = apply_template(m, in).prompt;
        history          = tokens_of(m, r.history_prompt, r);
    } catch (const Error &) {
        throw;
    } catch (const std::exception &) {
        return 0;  // some templates refuse a history that ends oddly; only a checkpoint is lost
    }
    return common_prefix(history, r.prompt);
}

}  // namespace

// Where the last message starts, in tokens: a checkpoint there lets the next call change the
// last message and still reuse the rest. The place is only a hint (a checkpoint holds exactly
// the state of the tokens before it, wherever it is), so it is read off the main render where
// it can be: the text the template's loop output for the last message, found last in the
// prompt, and the tokens that spell the prompt up to it. Else the history is rendered again.
size_t last_message_start(const ModelView & m, const common_chat_templates_inputs & in, Request & r) {
    // a continued message is not rendered by the template (common/ appends it after the render)
    const bool   own = in.continue_final_message == COMMON_CHAT_CONTINUATION_NONE && !r.last_message_text.empty();
    const size_t at  = own ? r.chat.prompt.rfind(r.last_message_text) : std::string::npos;
    if (at != std::string::npos && !r.render_history) {
        const size_t n = m.tokens.tokens_before(r.session, r.chat.prompt, at);
        if (n != SIZE_MAX) {
            return n;
        }
    }
    return history_length(m, in, r);  // a copy: the history is rendered without the last message
}

}  // namespace el
