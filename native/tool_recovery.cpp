// tool_recovery.cpp -- tool calls written as JSON in the content; see tool_recovery.h.

#include "tool_recovery.h"

#include "json_args.h"

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
    if (s.size() < 6 || s.compare(s.size() - 3, 3, "```") != 0) {
        return false;
    }
    size_t nl = s.find('\n');
    if (nl == std::string::npos || nl > s.size() - 3) {
        return false;
    }
    std::string lang = trim(s.substr(3, nl - 3));
    if (!lang.empty() && lang != "json" && lang != "JSON" && lang != "tool_call") {
        return false;
    }
    s = trim(s.substr(nl + 1, s.size() - 3 - nl - 1));
    return s.find("```") == std::string::npos;
}

// {"name": N, "arguments": {...}} (also "parameters", or wrapped in
// {"type": "function", "function": {...}}), N one of the offered tools.
bool as_tool_call(const json & v, const std::set<std::string> & names, common_chat_tool_call & out) {
    if (!v.is_object()) {
        return false;
    }
    const json & fn = v.contains("function") && v["function"].is_object() ? v["function"] : v;
    if (!fn.contains("name") || !fn["name"].is_string() || !names.count(fn["name"].get<std::string>())) {
        return false;
    }
    const char * key = fn.contains("arguments") ? "arguments" : fn.contains("parameters") ? "parameters" : nullptr;
    if (key == nullptr) {
        return false;
    }
    json args = fn[key];
    if (args.is_string()) {
        args = json::parse(args.get<std::string>(), nullptr, false);
    }
    if (!args.is_object()) {
        return false;
    }
    out.name      = fn["name"].get<std::string>();
    out.arguments = dump(args);
    return true;
}

// Split text into consecutive top-level JSON values separated only by whitespace
// or commas (small models often write several calls one per line, or a list
// without its brackets, instead of an array).
bool split_json_values(const std::string & body, std::vector<json> & values) {
    size_t i = 0;
    while (i < body.size()) {
        i = body.find_first_not_of(values.empty() ? " \t\r\n" : " \t\r\n,", i);
        if (i == std::string::npos) {
            break;
        }
        if (body[i] != '{' && body[i] != '[') {
            return false;
        }
        int depth = 0;
        bool in_string = false;
        size_t j = i;
        for (; j < body.size(); j++) {
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
                break;
            }
        }
        if (j >= body.size()) {
            return false;
        }
        json v = json::parse(body.substr(i, j + 1 - i), nullptr, false);
        if (v.is_discarded()) {
            return false;
        }
        values.push_back(std::move(v));
        i = j + 1;
    }
    return !values.empty();
}

}  // namespace

// The content is, or holds as its only substance, one call or a list of calls.
// Prose that mentions a tool, or code that calls it, never qualifies.
bool recover_tool_calls(const std::string & content, const std::set<std::string> & names,
                        std::vector<common_chat_tool_call> & out) {
    std::string body = content;
    std::vector<json> values;
    if (names.empty() || !unfence(body) || !split_json_values(body, values)) {
        return false;
    }
    json items = json::array();
    for (json & v : values) {
        if (v.is_array()) {
            for (json & x : v) {
                items.push_back(std::move(x));
            }
        } else {
            items.push_back(std::move(v));
        }
    }
    std::vector<common_chat_tool_call> calls;
    for (const json & item : items) {
        common_chat_tool_call tc;
        if (!as_tool_call(item, names, tc)) {
            return false;
        }
        calls.push_back(std::move(tc));
    }
    if (calls.empty()) {
        return false;
    }
    out = std::move(calls);
    return true;
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
