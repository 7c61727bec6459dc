// messages.cpp -- see messages.h.

#include "messages.h"

#include "json_args.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>
#include <string_view>

namespace el {

namespace {

// One message of the caller's array, `i` its index (only to name it in an error).
void check_message(const json & m, size_t i) {
    static const std::set<std::string> roles = {"system", "developer", "user", "assistant", "tool"};
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) {
        fail(where + " must be an object");
    }
    if (!m.contains("role") || !m["role"].is_string()) {
        fail(where + " needs a string \"role\"");
    }
    const std::string role = m["role"].get<std::string>();
    if (!roles.count(role)) {
        fail(where + " has unknown role \"" + role + "\" (expected system, developer, user, assistant or tool)");
    }
    const json * content = find(m, "content");
    if (content != nullptr && !content->is_string() && !content->is_array()) {
        fail(where + ".content must be a string, an array of parts or null");
    }
    if (content != nullptr && content->is_array()) {
        for (const json & part : *content) {
            if (!part.is_object() || get_string(part, "type", "") != "text" || !part.contains("text") ||
                !part["text"].is_string()) {
                fail(where + ".content parts must be {\"type\": \"text\", \"text\": string}");
            }
        }
    }
    const json * calls = find(m, "tool_calls");
    if (calls != nullptr) {
        if (role != "assistant" || !calls->is_array()) {
            fail(where + ".tool_calls must be an array on an assistant message");
        }
        for (size_t j = 0; j < calls->size(); j++) {
            const json & c = (*calls)[j];
            if (!c.is_object() || !c.contains("function") || !c["function"].is_object() ||
                !c["function"].contains("name") || !c["function"]["name"].is_string() ||
                !c["function"].contains("arguments")) {
                fail(where + ".tool_calls entries must be {\"type\": \"function\", \"function\": {\"name\", \"arguments\"}}");
            }
            if (c["function"]["arguments"].is_string()) {  // JSON text the template reads as JSON
                check_depth(c["function"]["arguments"].get_ref<const std::string &>(),
                            where + ".tool_calls[" + std::to_string(j) + "].function.arguments");
            }
        }
    } else if (content == nullptr) {
        fail(where + " needs \"content\"");
    }
}

// OpenAI allows "type" to be omitted on tool calls in history, and "content" on a message
// with tool calls; common/ does not. The message as common/ reads it, or nothing when it
// already is (the usual case: no copy is made then).
std::optional<json> normalized_message(const json & m) {
    std::optional<json> out;
    if (!m.contains("tool_calls") || !m["tool_calls"].is_array()) {
        return out;
    }
    auto edit = [&]() -> json & {
        if (!out) {
            out = m;
        }
        return *out;
    };
    if (!m.contains("content")) {
        edit()["content"] = nullptr;
    }
    for (size_t c = 0; c < m["tool_calls"].size(); c++) {
        if (!m["tool_calls"][c].contains("type")) {
            edit()["tool_calls"][c]["type"] = "function";
        }
    }
    return out;
}

// common/'s reading of checked messages, `text` the caller's own (the same value as a dump
// of `messages`): it is parsed again as common/'s JSON type rather than copied and dumped,
// unless a message had to be normalised.
std::vector<common_chat_msg> to_common(const json & messages, const std::string & text) {
    std::optional<json> normalized;
    for (size_t i = 0; i < messages.size(); i++) {
        if (std::optional<json> one = normalized_message(messages[i])) {
            if (!normalized) {
                normalized = messages;
            }
            (*normalized)[i] = std::move(*one);
        }
    }
    try {
        return common_chat_msgs_parse_oaicompat(normalized ? common_json::parse(dump(*normalized))
                                                           : common_json::parse(text));
    } catch (const std::exception & e) {
        fail(e.what());
    }
}

// One element of the array, read as the whole read reads it.
common_chat_msg read_message(std::string_view text, size_t i) {
    json one = json::array();
    one.push_back(json::parse(text.begin(), text.end()));
    check_message(one[0], i);
    return to_common(one, "[" + std::string(text) + "]").front();
}

}  // namespace

// The caller's messages read whole: parsed, each checked (the first error in order is the
// one reported) and converted.
std::vector<common_chat_msg> read_messages_whole(const char * text) {
    const json messages = parse_json_arg(text, "messages");
    if (!messages.is_array()) {
        fail("messages must be a JSON array");
    }
    if (messages.empty()) {
        fail("messages is empty");
    }
    for (size_t i = 0; i < messages.size(); i++) {
        check_message(messages[i], i);
    }
    return to_common(messages, text);
}

// The caller's messages, each element converted only when the handle has not read the same
// bytes before (native/message_cache.h). Where the element-wise read refuses the array, the
// whole read reads it, and words any error, as it always did.
std::vector<common_chat_msg> read_messages(MessageCache & cache, const std::string & session, const char * text,
                                           size_t & n_reused, std::vector<uint64_t> & ids, bool by_position) {
    if (text != nullptr) {
        try {
            if (auto msgs = cache.read(session, text, read_message, &n_reused, by_position, &ids)) {
                return std::move(*msgs);
            }
        } catch (const std::exception &) {
            // an element that does not read alone: the whole read says what is wrong
        }
    }
    n_reused = 0;
    ids.clear();
    return read_messages_whole(text);
}

size_t first_difference(const std::vector<common_chat_msg> & a, const std::vector<common_chat_msg> & b) {
    for (size_t i = 0; i < std::max(a.size(), b.size()); i++) {
        if (i >= a.size() || i >= b.size() || a[i] != b[i]) {
            return i;
        }
    }
    return SIZE_MAX;
}

}  // namespace el
