// tool_grammar.cpp -- grammars for tool calls; see tool_grammar.h.
//
// The bare-call grammar is lazy: until its trigger fires the model writes freely. The
// trigger is a PATTERN_FULL regex over everything generated so far: optional leading
// whitespace, an optional ```json fence, an optional "[" (parallel calls), then
// {"name": and at most the beginning of an offered tool's name. Its whitespace is
// exactly the grammar's `space` rule, and the name part only ever a prefix of a real
// name, so what llama.cpp replays into the grammar when it fires is always accepted
// (a rejected replay would throw out of the sampler). Text that overshoots the pattern
// in one token never triggers and stays free; recovery then reads it.
//
// Why trigger on the "name" key rather than on any "{": an answer that is a JSON object
// for some other reason (a user asking for JSON) stays possible; only the shape of a
// call is taken as a call.

#include "tool_grammar.h"

#include "common.h"
#include "json-schema-to-grammar.h"

#include <cctype>
#include <mutex>
#include <unordered_map>

namespace el {

namespace {

bool is_word_char(char c) { return std::isalnum((unsigned char) c) || c == '-'; }

// Prefix every rule name of a GBNF grammar (definitions and references), so that two
// grammars built separately can live in one without their helper rules colliding.
std::string prefix_rules(const std::string & gbnf, const std::string & prefix) {
    std::string out;
    out.reserve(gbnf.size() + gbnf.size() / 4);
    size_t i = 0;
    while (i < gbnf.size()) {
        const char c = gbnf[i];
        if (c == '"' || c == '[') {  // a literal or a character class: copy verbatim
            const char close = c == '"' ? '"' : ']';
            size_t j = i + 1;
            while (j < gbnf.size() && gbnf[j] != close) {
                j += gbnf[j] == '\\' ? 2 : 1;
            }
            out.append(gbnf, i, std::min(j + 1, gbnf.size()) - i);
            i = j + 1;
        } else if (c == '{' || c == '#') {  // a repetition count or a comment
            const size_t j = gbnf.find(c == '{' ? '}' : '\n', i);
            const size_t end = j == std::string::npos ? gbnf.size() : j + 1;
            out.append(gbnf, i, end - i);
            i = end;
        } else if (is_word_char(c)) {
            size_t j = i;
            while (j < gbnf.size() && is_word_char(gbnf[j])) {
                j++;
            }
            out += prefix;
            out.append(gbnf, i, j - i);
            i = j;
        } else {
            out += c;
            i++;
        }
    }
    return out;
}

// A regex matching any non-empty prefix of `name`: n(?:a(?:m(?:e)?)?)?
std::string prefix_regex(const std::string & name) {
    std::string open, close;
    for (size_t i = 0; i < name.size(); i++) {
        open += (i == 0 ? "" : "(?:") + regex_escape(std::string(1, name[i]));
        close += i == 0 ? "" : ")?";
    }
    return open + close;
}

// The trigger: see the file comment. WS is json-schema-to-grammar's `space` rule.
std::string bare_call_trigger(const json & tools, bool parallel) {
    const std::string ws = "(?: |\\n\\n?[ \\t]{0,20})?";
    std::string prefixes, names;
    for (const json & t : tools) {
        const std::string name = t["function"]["name"].get<std::string>();
        prefixes += (prefixes.empty() ? "" : "|") + prefix_regex(name);
        names += (names.empty() ? "" : "|") + regex_escape(name);
    }
    return std::string("^\\s*(") + "(?:```(?:json|JSON)?[ \\t\\r\\n]*)?" + (parallel ? "(?:\\[" + ws + ")?" : "") +
           "\\{" + ws + "\"name\"" + ws + ":" + ws + "(?:\"(?:(?:" + names + ")\"|" + prefixes + ")?)?" + ")$";
}

// GBNF for one call of the tools (see forced_call_grammar), built from their schemas.
std::string build_forced_call_grammar(const json & tools, const std::string & only, bool parallel) {
    json variants = json::array();
    for (const json & t : tools) {
        const json & fn = t["function"];
        const std::string name = fn["name"].get<std::string>();
        if (!only.empty() && name != only) {
            continue;
        }
        json params = fn.contains("parameters") && fn["parameters"].is_object() && !fn["parameters"].empty()
                          ? fn["parameters"]
                          : json{{"type", "object"}};
        variants.push_back(json{{"type", "object"},
                                {"properties", json{{"name", json{{"const", name}}}, {"arguments", params}}},
                                {"required", json::array({"name", "arguments"})},
                                {"additionalProperties", false}});
    }
    json call = variants.size() == 1 ? variants[0] : json{{"anyOf", variants}};
    json schema = parallel ? json{{"anyOf", json::array({call, json{{"type", "array"}, {"items", call}, {"minItems", 1}}})}}
                           : call;
    return json_schema_to_grammar(common_json::parse(dump(schema)));
}

// The grammars built so far, by the exact JSON of the tools and the two choices (the
// grammar depends on nothing else). Converting the schemas cost ~0.08 ms a call for one
// small tool, and an agent sends the same tools call after call. Process-wide, for every
// handle; bounded, and emptied when full.
class GrammarMemo {
  public:
    std::string get(const json & tools, const std::string & only, bool parallel) {
        std::string key = dump(tools);
        key += '\0';
        key += only;
        key += parallel ? '1' : '0';
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (auto it = memo_.find(key); it != memo_.end()) {
                return it->second;
            }
        }
        std::string grammar = build_forced_call_grammar(tools, only, parallel);  // may throw: nothing kept
        std::lock_guard<std::mutex> lock(mutex_);
        if (memo_.size() >= kMaxEntries || bytes_ + key.size() + grammar.size() > kMaxBytes) {
            memo_.clear();
            bytes_ = 0;
        }
        bytes_ += key.size() + grammar.size();
        memo_.emplace(std::move(key), grammar);
        return grammar;
    }

  private:
    static constexpr size_t kMaxEntries = 64;
    static constexpr size_t kMaxBytes   = 8u << 20;
    std::mutex                                   mutex_;
    std::unordered_map<std::string, std::string> memo_;
    size_t                                       bytes_ = 0;
};

}  // namespace

std::string forced_call_grammar(const json & tools, const std::string & only, bool parallel) {
    static GrammarMemo memo;
    return memo.get(tools, only, parallel);
}

std::string call_or_answer_grammar(const json & tools, bool parallel, const std::string & template_grammar,
                                   const std::string & answer) {
    // Every alternative is open from the first token (none is lazy): the model picks one by
    // what it writes first, its template's call opener (qwen's <tool_call>) or "{", and the
    // grammar keeps a stack per alternative until the text tells them apart.
    std::string grammar = prefix_rules(forced_call_grammar(tools, "", parallel), "call-");
    grammar += prefix_rules(answer, "answer-");
    if (!template_grammar.empty()) {
        grammar += prefix_rules(template_grammar, "tpl-");
        grammar += "root ::= tpl-root | call-root | answer-root\n";
    } else {
        grammar += "root ::= call-root | answer-root\n";
    }
    return grammar;
}

void add_bare_call_grammar(const json & tools, bool parallel, common_params_sampling & s) {
    // bare-root is one call; with parallel calls, a list of them is one value too.
    // Nothing may follow it: a small model that goes on writing call after call (the
    // runaway seen with qwen2.5-coder-0.5b) is cut where its first JSON value ends.
    std::string grammar = prefix_rules(forced_call_grammar(tools, "", false), "bare-");
    grammar += parallel ? "bare-calls ::= bare-root | \"[\" bare-space bare-root (bare-space \",\" bare-space bare-root)* bare-space \"]\"\n"
                        : "bare-calls ::= bare-root\n";
    grammar += "bare-fenced ::= \"```\" (\"json\" | \"JSON\")? [ \\t\\r\\n]* bare-calls [ \\t\\r\\n]* \"```\"\n";
    const std::string template_grammar = common_grammar_value(s.grammar);
    if (!template_grammar.empty()) {
        grammar += prefix_rules(template_grammar, "tpl-");
        grammar += "root ::= tpl-root | bare-calls | bare-fenced\n";
    } else {
        grammar += "root ::= bare-calls | bare-fenced\n";
    }
    s.grammar      = common_grammar(COMMON_GRAMMAR_TYPE_TOOL_CALLS, grammar);
    s.grammar_lazy = true;
    s.grammar_triggers.push_back({COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN_FULL, bare_call_trigger(tools, parallel)});
}

}  // namespace el
