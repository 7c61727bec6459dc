// json_args.cpp -- typed getters over caller JSON; see json_args.h.

#include "json_args.h"

#include <cmath>

namespace el {

void fail(const std::string & msg) { throw UserError(msg); }

std::string dump(const json & j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void check_depth(std::string_view s, const std::string & what) {
    size_t depth = 0;
    for (size_t i = 0; i < s.size(); i++) {
        const char c = s[i];
        if (c == '"') {
            for (i++; i < s.size() && s[i] != '"'; i++) {
                i += s[i] == '\\' ? 1 : 0;
            }
        } else if (c == '[' || c == '{') {
            if (++depth > kMaxJsonDepth) {
                fail(what + " nests arrays and objects deeper than " + std::to_string(kMaxJsonDepth) + " levels");
            }
        } else if ((c == ']' || c == '}') && depth > 0) {
            depth--;
        }
    }
}

json parse_json_arg(const char * text, const char * what) {
    if (text == nullptr) {
        fail(std::string(what) + " is NULL");
    }
    check_depth(text, what);
    try {
        return json::parse(text);
    } catch (const json::exception & e) {
        fail(std::string(what) + " is not valid JSON: " + e.what());
    }
}

// Typed getters that name the key in their error, instead of nlohmann's
// "type must be number, but is string".
const json * find(const json & obj, const char * key) {
    auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
}

double get_number(const json & obj, const char * key, double def, double lo, double hi) {
    const json * v = find(obj, key);
    if (v == nullptr) {
        return def;
    }
    if (!v->is_number()) {
        fail(std::string("\"") + key + "\" must be a number");
    }
    double d = v->get<double>();
    if (!std::isfinite(d) || d < lo || d > hi) {
        fail(std::string("\"") + key + "\" must be between " + std::to_string(lo) + " and " + std::to_string(hi));
    }
    return d;
}

int64_t get_int(const json & obj, const char * key, int64_t def, int64_t lo, int64_t hi) {
    const json * v = find(obj, key);
    if (v == nullptr) {
        return def;
    }
    if (!v->is_number_integer() && !v->is_number_unsigned()) {
        fail(std::string("\"") + key + "\" must be an integer");
    }
    const bool in_range = v->is_number_unsigned()
                              ? v->get<uint64_t>() <= (uint64_t) hi && (lo <= 0 || v->get<uint64_t>() >= (uint64_t) lo)
                              : v->get<int64_t>() >= lo && v->get<int64_t>() <= hi;
    if (!in_range) {
        fail(std::string("\"") + key + "\" must be between " + std::to_string(lo) + " and " + std::to_string(hi));
    }
    return v->get<int64_t>();
}

bool get_bool(const json & obj, const char * key, bool def) {
    const json * v = find(obj, key);
    if (v == nullptr) {
        return def;
    }
    if (!v->is_boolean()) {
        fail(std::string("\"") + key + "\" must be true or false");
    }
    return v->get<bool>();
}

std::string get_string(const json & obj, const char * key, const std::string & def) {
    const json * v = find(obj, key);
    if (v == nullptr) {
        return def;
    }
    if (!v->is_string()) {
        fail(std::string("\"") + key + "\" must be a string");
    }
    return v->get<std::string>();
}

void reject_unknown_keys(const json & obj, const std::set<std::string> & known, const char * what) {
    for (auto it = obj.begin(); it != obj.end(); ++it) {
        if (!known.count(it.key())) {
            fail(std::string("unknown ") + what + " key \"" + it.key() + "\"");
        }
    }
}

}  // namespace el
