// grammar_choice.cpp -- the grammar of a call; see grammar_choice.h.

#include "grammar_choice.h"

#include "json-schema-to-grammar.h"
#include "test_hooks.h"
#include "tool_grammar.h"

#include <cmath>
#include <map>

namespace el {

namespace {

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

}  // namespace

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

}  // namespace el
