// request_options.cpp -- el_generate's arguments read and checked; see request_options.h.

#include "request_options.h"

#include "grammar_limits.h"
#include "messages.h"
#include "test_hooks.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdlib>

namespace el {

namespace {

void check_tools(const json & tools, const std::string & what = "tools") {
    if (!tools.is_array()) {
        fail(what + " must be a JSON array");
    }
    std::set<std::string> seen;
    for (size_t i = 0; i < tools.size(); i++) {
        const json & t = tools[i];
        const std::string where = what + "[" + std::to_string(i) + "]";
        if (!t.is_object() || get_string(t, "type", "function") != "function" || !t.contains("function") ||
            !t["function"].is_object()) {
            fail(where + " must be {\"type\": \"function\", \"function\": {...}}");
        }
        const json & fn = t["function"];
        const std::string name = get_string(fn, "name", "");
        if (name.empty()) {
            fail(where + ".function needs a non-empty \"name\"");
        }
        // OpenAI's rule for a function's name: the templates write it into JSON and XML, and a
        // model asked to call "get weather" writes "get_weather" as often as not
        const bool word = name.size() <= 64 && std::all_of(name.begin(), name.end(), [](unsigned char c) {
            return std::isalnum(c) || c == '_' || c == '-';
        });
        if (!word) {
            fail(where + ".function.name \"" + name + "\" is not a valid tool name (letters, digits, _ and -, at most 64)");
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

void read_logit_bias(const json & opt, const llama_vocab * vocab, bool ignore_eos, common_params_sampling & s) {
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
    if (ignore_eos) {
        // Generate until max_tokens (benchmarks): no end-of-generation token can be sampled.
        for (llama_token t = 0; t < llama_vocab_n_tokens(vocab); t++) {
            if (llama_vocab_is_eog(vocab, t)) {
                s.logit_bias.push_back({t, -INFINITY});
            }
        }
    }
}

}  // namespace

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
                                 "timeout_ms", "cache_prompt", "session", "scope", "request_id", "speculative",
                                 "grammar_tools", "_test"},
                       "options");
    return in;
}

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
    r.ignore_eos = get_bool(opt, "ignore_eos", false);
    read_logit_bias(opt, m.vocab, r.ignore_eos, s);
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

json read_grammar_tools(const json & opt, const std::string & named, const Request & r) {
    const json * gt = find(opt, "grammar_tools");
    if (gt == nullptr || gt->is_null()) {
        return json();
    }
    if (!gt->is_array() || gt->empty()) {
        fail("\"grammar_tools\" must be a non-empty array of tools (those of \"tools\" that a call may name, "
             "with the schemas its arguments must match)");
    }
    check_tools(*gt, "grammar_tools");
    bool names_named = false;
    for (size_t i = 0; i < gt->size(); i++) {
        const std::string name = (*gt)[i]["function"]["name"].get<std::string>();
        if (!r.tool_names.count(name)) {  // a call the prompt never showed the model could not be meant
            fail("grammar_tools[" + std::to_string(i) + "] names \"" + name + "\", which is not among the tools");
        }
        names_named = names_named || name == named;
    }
    if (r.tool_choice == ToolChoice::Named && !names_named) {
        fail("\"tool_choice\" names \"" + named + "\", which is not among the grammar_tools");
    }
    return *gt;
}

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

}  // namespace el
