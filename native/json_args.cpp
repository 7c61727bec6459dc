// json_args.cpp -- typed getters over caller JSON; see json_args.h.

#include "json_args.h"

#include <algorithm>
#include <cctype>
#include <vector>

#include <cmath>
#include <cstring>

namespace el {

void fail(const std::string & msg) { throw UserError(msg); }

std::string dump(const json & j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string error_json(el_code code, const std::string & msg) {
    return dump(json{{"error", msg}, {"code", (int) code}});
}

// Where the string that opens at s[at] ('"') ends (its closing quote); npos if the text ends
// first. Most of a message's bytes are inside strings: memchr finds each quote, and a quote
// after an odd number of backslashes is part of the string.
size_t json_string_end(std::string_view s, size_t at) {
    for (size_t from = at + 1; from < s.size();) {
        const void * q = std::memchr(s.data() + from, '"', s.size() - from);
        if (q == nullptr) {
            break;
        }
        const size_t quote = (size_t) (static_cast<const char *>(q) - s.data());
        size_t       slashes = 0;
        while (quote - slashes > at + 1 && s[quote - slashes - 1] == '\\') {
            slashes++;
        }
        if (slashes % 2 == 0) {
            return quote;
        }
        from = quote + 1;
    }
    return std::string_view::npos;
}

void check_depth(std::string_view s, const std::string & what) {
    size_t depth = 0;
    for (size_t i = 0; i < s.size(); i++) {
        const char c = s[i];
        if (c == '"') {
            if ((i = json_string_end(s, i)) == std::string_view::npos) {
                return;  // an unterminated string: the parser says so
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

namespace {

// Levenshtein distance, case-insensitive, capped: how far a misspelt key is from a known one.
size_t edit_distance(const std::string & a, const std::string & b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); j++) {
        row[j] = j;
    }
    for (size_t i = 1; i <= a.size(); i++) {
        size_t diag = row[0];
        row[0]      = i;
        for (size_t j = 1; j <= b.size(); j++) {
            const size_t up   = row[j];
            const bool   same = std::tolower((unsigned char) a[i - 1]) == std::tolower((unsigned char) b[j - 1]);
            row[j]            = std::min({row[j] + 1, row[j - 1] + 1, diag + (same ? 0 : 1)});
            diag              = up;
        }
    }
    return row[b.size()];
}

}  // namespace

void reject_unknown_keys(const json & obj, const std::set<std::string> & known, const char * what) {
    for (auto it = obj.begin(); it != obj.end(); ++it) {
        if (known.count(it.key())) {
            continue;
        }
        // The nearest known key, when it is near enough to be what was meant (a third of its
        // letters or fewer off), and every key, so the caller need not look them up.
        const std::string & key  = it.key();
        std::string         best;
        size_t              dist = std::max<size_t>(1, key.size() / 3) + 1;
        std::string         all;
        for (const std::string & k : known) {
            if (k[0] == '_') {
                continue;  // test hooks are not offered
            }
            all += (all.empty() ? "" : ", ") + k;
            if (const size_t d = edit_distance(key, k); d < dist) {
                dist = d;
                best = k;
            }
        }
        fail(EL_E_UNKNOWN_KEY, std::string("unknown ") + what + " key \"" + key + "\"" +
             (best.empty() ? "" : "; did you mean \"" + best + "\"?") + " (known keys: " + all + ")");
    }
}

}  // namespace el
