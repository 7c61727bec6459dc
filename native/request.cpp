// request.cpp -- from the caller's JSON to a runnable Request; see request.h.
//
// The steps, in order: read the three JSON arguments, the test hooks, the sampling
// options, tool choice and response format; render the prompt with the model's chat
// template; choose the grammar; tokenize and check that the prompt fits.

#include "request.h"

#include "common.h"
#include "grammar_limits.h"
#include "json-schema-to-grammar.h"
#include "json_args.h"
#include "messages.h"
#include "patched.h"
#include "timing.h"
#include "tool_grammar.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>

namespace el {

namespace {

void check_tools(const json & tools) {
    if (!tools.is_array()) {
        fail("tools must be a JSON array");
    }
    std::set<std::string> seen;
    for (size_t i = 0; i < tools.size(); i++) {
        const json & t = tools[i];
        const std::string where = "tools[" + std::to_string(i) + "]";
        if (!t.is_object() || get_string(t, "type", "function") != "function" || !t.contains("function") ||
            !t["function"].is_object()) {
            fail(where + " must be {\"type\": \"function\", \"function\": {...}}");
        }
        const json & fn = t["function"];
        const std::string name = get_string(fn, "name", "");
        if (name.empty()) {
            fail(where + ".function needs a non-empty \"name\"");
        }
        if (!seen.insert(name).second) {
            fail(where + ": duplicate tool name \"" + name + "\"");
        }
        const json * params = find(fn, "parameters");
        if (params != nullptr && !params->is_object()) {
            fail(where + ".function.parameters must be a JSON schema object");
        }
        if (params != nullptr) {
            check_grammar_limits(*params, where + ".function.parameters", false);  // cost only
        }
        get_string(fn, "description", "");
    }
}

struct Inputs {
    const char *                 messages_text = nullptr;  // as the caller sent it
    std::vector<common_chat_msg> messages;                 // as common/ reads them
    size_t                       n_messages_reused = 0;    // of them, taken from the handle's cache
    std::vector<uint64_t>        message_ids;              // their numbers in the cache (empty: whole read)
    json                         tools;
    json                         opt;
    Owner                        owner;  // its "scope" and "session" (read_owner)
};

// The "_test.messages_by_position" hook (the message cache's fault), looked up in the options
// before the messages are read.
bool messages_by_position(const json & opt) {
#ifdef EL_TEST_HOOKS
    const json * t = opt.is_object() ? find(opt, "_test") : nullptr;
    const json * v = t != nullptr && t->is_object() ? find(*t, "messages_by_position") : nullptr;
    return v != nullptr && v->is_boolean() && v->get<bool>();
#else
    (void) opt;
    return false;
#endif
}

Inputs read_inputs(MessageCache & cache, const std::optional<std::string> & default_scope, const char * messages_json,
                   const char * tools_json, const char * options_json) {
    Inputs in;
    // parsed first for the session and the test hook; what is wrong with them is reported
    // after the messages and the tools, as always
    if (options_json != nullptr) {
        check_depth(options_json, "options");
    }
    json opt = options_json == nullptr ? json::object() : json::parse(options_json, nullptr, false);
    in.messages_text = messages_json;
    // the session and scope are checked later
    in.owner    = read_owner(opt, default_scope);
    in.messages = read_messages(cache, in.owner.key(), messages_json, in.n_messages_reused, in.message_ids,
                                messages_by_position(opt));
    in.tools = tools_json == nullptr ? json::array() : parse_json_arg(tools_json, "tools");
    if (in.tools.is_null()) {
        in.tools = json::array();
    }
    check_tools(in.tools);
    in.opt = opt.is_discarded() ? parse_json_arg(options_json, "options") : std::move(opt);
    if (in.opt.is_null()) {
        in.opt = json::object();
    }
    if (!in.opt.is_object()) {
        fail("options must be a JSON object");
    }
    reject_unknown_keys(in.opt, {"max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop",
                                 "repeat_penalty", "frequency_penalty", "presence_penalty", "repeat_last_n",
                                 "tool_choice", "parallel_tool_calls", "response_format", "logprobs",
                                 "top_logprobs", "logit_bias", "ignore_eos", "tool_call_recovery",
                                 "timeout_ms", "cache_prompt", "session", "scope", "request_id", "speculative", "_test"},
                       "options");
    return in;
}

// The check_messages test hook: the messages as read (from the handle's cache, mostly)
// against a whole read of the caller's text; the call fails where they differ.
void check_cached_messages(const Inputs & in) {
    const std::vector<common_chat_msg> whole = read_messages_whole(in.messages_text);
    if (const size_t at = first_difference(whole, in.messages); at != SIZE_MAX) {
        fail("test hook check_messages: the cached reading of the messages differs from a whole one at message " +
             std::to_string(at) + " of " + std::to_string(whole.size()));
    }
}

#ifdef EL_TEST_HOOKS
// "_test": {"corrupt": {"kind": "stale" | "missing" | "duplicate" | "other" | "shift", "at": i}}
void read_corruption(const json & t, Request & r) {
    const json * c = find(t, "corrupt");
    if (c == nullptr) {
        return;
    }
    if (!c->is_object()) {
        fail("\"_test.corrupt\" must be an object");
    }
    reject_unknown_keys(*c, {"kind", "at"}, "_test.corrupt");
    const std::string kind = get_string(*c, "kind", "");
    r.corrupt = kind == "stale"       ? Corruption::Stale
              : kind == "missing"     ? Corruption::Missing
              : kind == "duplicate"   ? Corruption::Duplicate
              : kind == "other"       ? Corruption::Other
              : kind == "shift"       ? Corruption::Shift
                                      : Corruption::None;
    if (r.corrupt == Corruption::None) {
        fail("\"_test.corrupt.kind\" must be stale, missing, duplicate, other or shift");
    }
    r.corrupt_at = get_int(*c, "at", -1, INT32_MIN, INT32_MAX);
}

// "_test": {"force": [token ids]}: decode exactly these tokens (logprobs still report
// the model's distribution at each), so two handles can be compared position by position.
void read_forced_tokens(const json & t, const llama_vocab * vocab, Request & r) {
    const json * f = find(t, "force");
    if (f == nullptr) {
        return;
    }
    if (!f->is_array() || f->empty()) {
        fail("\"_test.force\" must be a non-empty array of token ids");
    }
    for (const json & id : *f) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= llama_vocab_n_tokens(vocab)) {
            fail("\"_test.force\" holds a value that is not a token id of this model");
        }
        r.forced.push_back(id.get<llama_token>());
    }
}
#endif

// The "_test" hooks; returns the largest top_logprobs the call may ask for.
int32_t read_test_hooks(const json & opt, const llama_vocab * vocab, Request & r) {
    int32_t max_top_logprobs = 20;
    if (const json * t = find(opt, "_test")) {
#ifdef EL_TEST_HOOKS
        if (!t->is_object()) {
            fail("\"_test\" must be an object");
        }
        reject_unknown_keys(*t, {"top_logprobs", "reuse", "fail_after_prefill", "output", "force_output", "device_lost",
                                 "sampler_chain", "corrupt", "force", "leak_bytes", "probe", "check_tokens",
                                 "tokens_ignore_edits", "check_messages", "messages_by_position", "prepare_only",
                                 "render_history"},
                            "_test");
        r.device_lost = get_bool(*t, "device_lost", false);
        if (find(*t, "output") != nullptr) {
            r.canned_output = get_string(*t, "output", "");
            r.has_canned_output = true;
        }
        if (find(*t, "force_output") != nullptr) {
            // The whole output, decoded token by token as if sampled: streaming, stop
            // strings and limits apply, and it ends as if the model ended it.
            r.forced      = common_tokenize(vocab, get_string(*t, "force_output", ""), false, true);
            r.forced_only = true;
        }
        max_top_logprobs = llama_vocab_n_tokens(vocab);
        const std::string reuse = get_string(*t, "reuse", "checked");
        r.unsafe_reuse = reuse == "trust_seq_rm" ? UnsafeReuse::TrustSeqRm
                       : reuse == "corrupt"      ? UnsafeReuse::Corrupt
                                                 : UnsafeReuse::None;
        r.fail_after_prefill = get_bool(*t, "fail_after_prefill", false);
        r.sampler_chain      = get_bool(*t, "sampler_chain", false);
        read_corruption(*t, r);
        read_forced_tokens(*t, vocab, r);
        r.leak_bytes = get_int(*t, "leak_bytes", 0, 0, 1 << 20);
        r.probe      = (int32_t) get_int(*t, "probe", 0, 0, INT32_MAX);
        r.check_tokens        = get_bool(*t, "check_tokens", false);
        r.tokens_ignore_edits = get_bool(*t, "tokens_ignore_edits", false);
        r.check_messages      = get_bool(*t, "check_messages", false);
        get_bool(*t, "messages_by_position", false);  // read before the messages (read_inputs)
        r.prepare_only        = get_bool(*t, "prepare_only", false);
        r.render_history      = get_bool(*t, "render_history", false);
#else
        (void) t;
        (void) vocab;
        (void) r;
        fail("\"_test\" hooks are not compiled into this library");
#endif
    }
    return max_top_logprobs;
}

void read_logit_bias(const json & opt, const llama_vocab * vocab, common_params_sampling & s) {
    if (const json * bias = find(opt, "logit_bias")) {
        if (!bias->is_object()) {
            fail("\"logit_bias\" must be an object {\"<token id>\": bias}");
        }
        const int32_t n_vocab = llama_vocab_n_tokens(vocab);
        for (auto it = bias->begin(); it != bias->end(); ++it) {
            char * end = nullptr;
            long id = std::strtol(it.key().c_str(), &end, 10);
            if (it.key().empty() || *end != '\0' || id < 0 || id >= n_vocab) {
                fail("\"logit_bias\" key \"" + it.key() + "\" is not a token id of this model (0.." +
                     std::to_string(n_vocab - 1) + ")");
            }
            if (!it.value().is_number() || !std::isfinite(it.value().get<double>())) {
                fail("\"logit_bias\" values must be finite numbers");
            }
            s.logit_bias.push_back({(llama_token) id, std::clamp(it.value().get<float>(), -100.0f, 100.0f)});
        }
    }
    if (get_bool(opt, "ignore_eos", false)) {
        // Generate until max_tokens (benchmarks): no end-of-generation token can be sampled.
        for (llama_token t = 0; t < llama_vocab_n_tokens(vocab); t++) {
            if (llama_vocab_is_eog(vocab, t)) {
                s.logit_bias.push_back({t, -INFINITY});
            }
        }
    }
}

// Sampling, limits, logprobs and stop strings.
void read_sampling(const json & opt, const ModelView & m, int32_t max_top_logprobs, Request & r) {
    const Config & cfg = m.cfg;
    common_params_sampling & s = r.sampling;
    s.temp  = (float) get_number(opt, "temperature", cfg.temperature, -1e9, 1e9);
    s.top_p = (float) get_number(opt, "top_p", cfg.top_p, 0.0, 1.0);
    s.top_k = (int32_t) get_int(opt, "top_k", cfg.top_k, 0, INT32_MAX);
    s.min_p = (float) get_number(opt, "min_p", cfg.min_p, 0.0, 1.0);
    s.seed  = (uint32_t) get_int(opt, "seed", cfg.seed, 0, UINT32_MAX);
    // llama.cpp's penalties sampler over the tokens generated so far: llama-cpp-python's and
    // llama-server's repeat_penalty (1: off) and repeat_last_n (-1: the whole context), OpenAI's
    // frequency_penalty and presence_penalty (0: off; OpenAI's range)
    s.penalty_repeat  = (float) get_number(opt, "repeat_penalty", 1.0, 0.0, 10.0);
    s.penalty_freq    = (float) get_number(opt, "frequency_penalty", 0.0, -2.0, 2.0);
    s.penalty_present = (float) get_number(opt, "presence_penalty", 0.0, -2.0, 2.0);
    s.penalty_last_n  = (int32_t) get_int(opt, "repeat_last_n", 64, -1, INT32_MAX);
    if (s.penalty_last_n == -1) {
        s.penalty_last_n = m.n_ctx;
    }
    s.no_perf = true;
    r.max_tokens = (int32_t) get_int(opt, "max_tokens", cfg.max_tokens, 1, INT32_MAX);
    r.timeout_ms = get_number(opt, "timeout_ms", 0, 0, 1e12);
    r.recover    = get_bool(opt, "tool_call_recovery", cfg.tool_call_recovery);

    if (get_bool(opt, "logprobs", false)) {
        r.top_logprobs = (int32_t) get_int(opt, "top_logprobs", 0, 0, 20);
        if (const json * t = find(opt, "_test")) {
            r.top_logprobs = (int32_t) get_int(*t, "top_logprobs", r.top_logprobs, 0, max_top_logprobs);
        }
    } else if (find(opt, "top_logprobs") != nullptr) {
        fail("\"top_logprobs\" needs \"logprobs\": true");
    }
    read_logit_bias(opt, m.vocab, s);
    if (const json * stop = find(opt, "stop")) {
        const json list = stop->is_array() ? *stop : json::array({*stop});
        if (list.size() > kMaxStops) {
            fail("\"stop\" takes at most " + std::to_string(kMaxStops) + " strings");
        }
        for (const json & x : list) {
            if (!x.is_string()) {
                fail("\"stop\" must be a string or an array of strings");
            }
            if (x.get<std::string>().size() > kMaxStopLength) {
                fail("\"stop\" strings are at most " + std::to_string(kMaxStopLength) + " bytes long");
            }
            if (!x.get<std::string>().empty()) {
                r.stops.push_back(x.get<std::string>());
            }
        }
    }
}

// tool_choice; returns the named function, if one is named.
std::string read_tool_choice(const json & opt, const json & tools, Request & r) {
    static const char * expected =
        "\"tool_choice\" must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}";
    std::string named;
    if (const json * tc = find(opt, "tool_choice")) {
        if (tc->is_string()) {
            const std::string v = tc->get<std::string>();
            if (v == "auto") {
                r.tool_choice = ToolChoice::Auto;
            } else if (v == "none") {
                r.tool_choice = ToolChoice::None;
            } else if (v == "required") {
                r.tool_choice = ToolChoice::Required;
            } else {
                fail(expected);
            }
        } else if (tc->is_object() && tc->contains("function") && (*tc)["function"].is_object()) {
            named = get_string((*tc)["function"], "name", "");
            r.tool_choice = ToolChoice::Named;
        } else {
            fail(expected);
        }
    }
    for (const json & t : tools) {
        const json & fn = t["function"];
        r.tool_names.insert(fn["name"].get<std::string>());
        r.tool_params[fn["name"].get<std::string>()] = fn.contains("parameters") ? fn["parameters"] : json::object();
    }
    if ((r.tool_choice == ToolChoice::Required || r.tool_choice == ToolChoice::Named) && tools.empty()) {
        fail("\"tool_choice\" asks for a tool call but no tools were given");
    }
    if (r.tool_choice == ToolChoice::Named && !r.tool_names.count(named)) {
        fail("\"tool_choice\" names \"" + named + "\", which is not among the tools");
    }
    return named;
}

// response_format; returns the schema the output must match, or null.
json read_response_format(const json & opt) {
    json schema;
    if (const json * rf = find(opt, "response_format")) {
        const std::string type = rf->is_object() ? get_string(*rf, "type", "") : "";
        if (type == "json_object") {
            schema = rf->contains("schema") ? (*rf)["schema"] : json{{"type", "object"}};
        } else if (type == "json_schema") {
            const json * js = find(*rf, "json_schema");
            if (js == nullptr || !js->is_object() || !js->contains("schema")) {
                fail("\"response_format\" json_schema needs {\"json_schema\": {\"schema\": {...}}}");
            }
            schema = (*js)["schema"];
        } else if (type != "text") {
            fail("\"response_format\" must be {\"type\": \"text\" | \"json_object\" | \"json_schema\"}");
        }
        if (!schema.is_null() && !schema.is_object()) {
            fail("\"response_format\" schema must be a JSON object");
        }
        if (!schema.is_null()) {  // what the grammar would drop or could not afford is refused here
            schema = enforceable_schema(schema, type == "json_schema" ? "response_format.json_schema.schema"
                                                                      : "response_format.schema");
        }
    }
    return schema;
}

// The model's template applied to `in`, sharing the handle's message values (null: not). A
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

// Render the prompt with the model's own template, and set up the output parser.
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
    for (const auto & stop : r.stops) {
        r.max_stop_len = std::max(r.max_stop_len, stop.size());
    }
    return in;
}

// The template's (lazy) tool-call grammar, exactly as llama-server applies it.
void use_template_grammar(const llama_vocab * vocab, const common_chat_params & chat, common_params_sampling & s) {
    s.grammar           = common_grammar(COMMON_GRAMMAR_TYPE_TOOL_CALLS, chat.grammar);
    s.grammar_lazy      = chat.grammar_lazy;
    s.generation_prompt = chat.generation_prompt;
    for (const auto & t : chat.preserved_tokens) {
        auto ids = common_tokenize(vocab, t, false, true);
        if (ids.size() == 1) {
            s.preserved_tokens.insert(ids[0]);
        }
    }
    for (const auto & trig : chat.grammar_triggers) {
        auto ids = trig.type == COMMON_GRAMMAR_TRIGGER_TYPE_WORD ? common_tokenize(vocab, trig.value, false, true)
                                                                 : std::vector<llama_token>{};
        if (ids.size() == 1 && s.preserved_tokens.count(ids[0])) {
            s.grammar_triggers.push_back({COMMON_GRAMMAR_TRIGGER_TYPE_TOKEN, trig.value, ids[0]});
        } else {
            s.grammar_triggers.push_back(trig);
        }
    }
}

// A grammar whose output must come right after the generation prompt, for a template that
// opens a thinking block there (Qwen3.5's "<think>\n"): the output first closes the block, or
// the parser would read the whole call (or the schema's JSON) as reasoning.
std::string after_open_thinking(const common_chat_params & chat, std::string grammar) {
    const std::string & gp  = chat.generation_prompt;
    const std::string & tag = chat.thinking_start_tag;
    const size_t        end = gp.find_last_not_of(" \n");
    if (tag.empty() || chat.thinking_end_tags.empty() || end == std::string::npos || end + 1 < tag.size() ||
        gp.compare(end + 1 - tag.size(), tag.size(), tag) != 0) {
        return grammar;
    }
    const size_t root = grammar.find("root ::=");
    if (root == std::string::npos || (root > 0 && grammar[root - 1] != '\n')) {
        return grammar;
    }
    grammar.replace(root, 4, "after-thinking");
    std::string close = chat.thinking_end_tags.front();
    std::string quoted;
    for (char c : close) {
        quoted += c == '"' || c == '\\' ? std::string("\\") + c : std::string(1, c);
    }
    return "root ::= \"" + quoted + "\" [ \\n]* after-thinking\n" + grammar;
}

// Grammar: ours where the output must be valid by construction, else the template's
// lazy one, joined (when recovery may read it) by the lazy grammar for a call written
// as bare JSON, the form small models fall back to (tool_grammar.h).
void choose_grammar(const llama_vocab * vocab, const json & tools, const std::string & named, bool parallel,
                    bool forced, bool tools_active, const json & schema, Request & r) {
    common_params_sampling & s = r.sampling;
    try {
        if (forced) {
            s.grammar = common_grammar(COMMON_GRAMMAR_TYPE_USER,
                                       after_open_thinking(r.chat, forced_call_grammar(tools, named, parallel)));
        } else if (!schema.is_null()) {
            const std::string answer = json_schema_to_grammar(common_json::parse(dump(schema)));
            if (tools_active) {  // a call or an answer in the schema, as OpenAI allows both
                s.grammar = common_grammar(COMMON_GRAMMAR_TYPE_USER,
                                           after_open_thinking(r.chat, call_or_answer_grammar(tools, parallel, r.chat.grammar, answer)));
                r.answer_grammar = after_open_thinking(r.chat, answer);
            } else {
                s.grammar = common_grammar(COMMON_GRAMMAR_TYPE_USER, after_open_thinking(r.chat, answer));
            }
        } else if (tools_active) {
            if (!r.chat.grammar.empty()) {
                use_template_grammar(vocab, r.chat, s);
            }
            if (r.recover && (s.grammar.empty() || s.grammar_lazy)) {
                add_bare_call_grammar(tools, parallel, s);
            }
        }
    } catch (const Error &) {
        throw;
    } catch (const std::exception & e) {
        fail(std::string("schema cannot be turned into a grammar: ") + e.what());
    }
}

// Greedy without a grammar: the sampler chain (logit bias and the model's suppressed
// tokens, then top-k/top-p/min-p, then a temperature <= 0 that keeps only the maximum)
// picks the argmax of the biased logits, so the decode loop reads it directly instead
// of building and sorting a candidate array over the whole vocabulary. With any grammar,
// lazy ones (tools) included, the sampler picks every token: reading the argmax while a
// lazy grammar waits for its trigger needed a patch whose gain no benchmark could show
// (docs/patches.md, llama-sampling-grammar-waits, dropped).
void set_greedy(const llama_vocab * vocab, Request & r) {
    const common_params_sampling & s = r.sampling;
    const bool penalties = s.penalty_repeat != 1.0f || s.penalty_freq != 0.0f || s.penalty_present != 0.0f;
    r.greedy = s.temp <= 0 && !r.sampler_chain && s.grammar.empty() && !penalties;
    if (!r.greedy) {
        return;
    }
    std::map<llama_token, float> bias;
    for (const auto & b : s.logit_bias) {
        bias[b.token] += b.bias;
    }
    int32_t n_suppress = 0;
    const llama_token * suppress = llama_vocab_get_suppress_tokens(vocab, &n_suppress);
    for (int32_t i = 0; i < n_suppress; i++) {
        bias[suppress[i]] = -INFINITY;
    }
    r.greedy_bias.assign(bias.begin(), bias.end());
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

}  // namespace

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
        check_cached_messages(inputs);
    }

    const std::string named = read_tool_choice(opt, inputs.tools, r);
    const bool parallel     = get_bool(opt, "parallel_tool_calls", true);
    const bool forced       = r.tool_choice == ToolChoice::Required || r.tool_choice == ToolChoice::Named;
    const bool tools_active = !inputs.tools.empty() && r.tool_choice != ToolChoice::None;
    const json schema       = read_response_format(opt);

    common_chat_templates_inputs in = render(m, inputs, parallel, tools_active, r);
    choose_grammar(m.vocab, inputs.tools, named, parallel, forced, tools_active, schema, r);
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
