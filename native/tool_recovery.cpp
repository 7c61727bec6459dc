// tool_recovery.cpp -- tool calls written as JSON in the content; see tool_recovery.h.

#include "tool_recovery.h"

#include "schema_check.h"

#include <set>
#include <utility>

namespace el {

// Strip one Markdown code fence (``` or ```json) if it is all there is.
namespace {

bool unfence(std::string & s) {
    auto trim = [](std::string x) {
        const char * ws = " \t\r\n";
        size_t b = x.find_first_not_of(ws);
        if (b == std::string::npos) {
            return std::string();
        }
        return x.substr(b, x.find_last_not_of(ws) - b + 1);
    };
    s = trim(s);
    if (s.rfind("```", 0) != 0) {
        return true;
    }
    size_t nl = s.find('\n');
    if (nl == std::string::npos) {
        return false;
    }
    std::string lang = trim(s.substr(3, nl - 3));
    if (!lang.empty() && lang != "json" && lang != "JSON" && lang != "tool_call") {
        return false;
    }
    // An unclosed fence is an output that ran out inside it: what it holds is read.
    const bool closed = s.size() >= nl + 4 && s.compare(s.size() - 3, 3, "```") == 0;
    s = trim(s.substr(nl + 1, s.size() - nl - 1 - (closed ? 3 : 0)));
    return s.find("```") == std::string::npos;
}

// {"name": N, "arguments": {...}} (also "parameters", or wrapped in
// {"type": "function", "function": {...}}), N one of the offered tools.
bool as_tool_call(const json & v, const ToolSchemas & tools, std::string & name, json & args) {
    if (!v.is_object()) {
        return false;
    }
    const json & fn = v.contains("function") && v["function"].is_object() ? v["function"] : v;
    if (!fn.contains("name") || !fn["name"].is_string() || !tools.count(fn["name"].get<std::string>())) {
        return false;
    }
    const char * key = fn.contains("arguments") ? "arguments" : fn.contains("parameters") ? "parameters" : nullptr;
    if (key == nullptr) {
        return false;
    }
    args = fn[key];
    if (args.is_string()) {
        args = json::parse(args.get<std::string>(), nullptr, false);
    }
    name = fn["name"].get<std::string>();
    return args.is_object();
}

// The end of the JSON value that starts at body[i], or npos when it is unterminated.
size_t value_end(const std::string & body, size_t i) {
    int depth = 0;
    bool in_string = false;
    for (size_t j = i; j < body.size(); j++) {
        const char c = body[j];
        if (in_string) {
            if (c == '\\') {
                j++;
            } else if (c == '"') {
                in_string = false;
            }
        } else if (c == '"') {
            in_string = true;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if ((c == '}' || c == ']') && --depth == 0) {
            return j;
        }
    }
    return std::string::npos;
}

// Split text into consecutive top-level JSON values separated only by whitespace
// or commas (small models often write several calls one per line, or a list
// without its brackets, instead of an array). An unterminated last value (the output
// ran out) is dropped; one that opens a list gives up its complete leading items.
bool split_json_values(const std::string & body, std::vector<json> & values) {
    size_t i = 0;
    const size_t first = values.size();
    while (i < body.size()) {
        i = body.find_first_not_of(values.size() == first ? " \t\r\n" : " \t\r\n,", i);
        if (i == std::string::npos) {
            break;
        }
        if (body[i] != '{' && body[i] != '[') {
            return false;
        }
        const size_t j = value_end(body, i);
        if (j == std::string::npos) {
            if (body[i] == '[') {
                split_json_values(body.substr(i + 1), values);  // its complete items, if any
            }
            break;
        }
        json v = json::parse(body.substr(i, j + 1 - i), nullptr, false);
        if (v.is_discarded()) {
            return false;
        }
        values.push_back(std::move(v));
        i = j + 1;
    }
    return values.size() > first;
}

// The items of the values: a list counts as its elements.
std::vector<json> flatten(std::vector<json> values) {
    std::vector<json> items;
    for (json & v : values) {
        if (v.is_array()) {
            for (json & x : v) {
                items.push_back(std::move(x));
            }
        } else {
            items.push_back(std::move(v));
        }
    }
    return items;
}

}  // namespace

// The content is, or holds as its only substance, one call or a list of calls.
// Prose that mentions a tool, or code that calls it, never qualifies.
bool recover_tool_calls(const std::string & content, const ToolSchemas & tools,
                        std::vector<common_chat_tool_call> & valid, std::vector<InvalidCall> & invalid) {
    std::string body = content;
    std::vector<json> values;
    if (tools.empty() || !unfence(body) || !split_json_values(body, values)) {
        return false;
    }
    std::vector<common_chat_tool_call> calls;
    std::set<std::pair<std::string, std::string>> seen;
    for (const json & item : flatten(std::move(values))) {
        common_chat_tool_call tc;
        json args;
        if (!as_tool_call(item, tools, tc.name, args)) {
            return false;
        }
        tc.arguments = dump(args);
        if (seen.insert({tc.name, tc.arguments}).second) {
            calls.push_back(std::move(tc));  // an exact repeat is the model running on: kept once
        }
    }
    if (calls.empty()) {
        return false;
    }
    check_tool_calls(calls, tools, invalid);
    valid = std::move(calls);
    return true;
}

void check_tool_calls(std::vector<common_chat_tool_call> & calls, const ToolSchemas & tools,
                      std::vector<InvalidCall> & invalid) {
    std::vector<common_chat_tool_call> kept;
    for (auto & tc : calls) {
        auto tool = tools.find(tc.name);
        const json args = json::parse(tc.arguments.empty() ? "{}" : tc.arguments, nullptr, false);
        std::string why = tool == tools.end()  ? ""
                        : args.is_discarded()  ? "arguments are not valid JSON"
                                               : schema_mismatch(args, tool->second);
        if (why.empty()) {
            kept.push_back(std::move(tc));
        } else {
            invalid.push_back({tc.id, tc.name, tc.arguments, why});
        }
    }
    calls = std::move(kept);
}

// Could this content still become a recovered call? Used while streaming to
// hold such content back until the end, so that the deltas never show as text
// what the final result returns as a tool call.
bool may_become_tool_call(const std::string & content) {
    size_t b = content.find_first_not_of(" \t\r\n");
    return b == std::string::npos || content[b] == '{' || content[b] == '[' || content.compare(b, 3, "```") == 0 ||
           (content.size() - b < 3 && std::string("```").compare(0, content.size() - b, content, b) == 0);
}

}  // namespace el
