// grammar_limits.cpp -- a schema's keywords checked against what its grammar enforces, and at
// what cost; see grammar_limits.h.

#include "grammar_limits.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <set>

namespace el {

namespace {

// The escapes a regex writes that the converter does not read (\d, \w, \s and their negations,
// \f, \v, escaped punctuation such as \/), spelled as what it reads: classes and \xHH. The
// pattern then means what it meant, and is enforced instead of dropped. What has no spelling
// (\D inside a class, \p{...}, \b) is left for Pattern to refuse.
std::string spell_escapes(const std::string & p) {
    static const std::string special = "^$.[]()|{}*+?";
    auto hex = [](char c) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\x%02X", (unsigned) (unsigned char) c);
        return std::string(buf);
    };
    std::string out;
    bool in_class = false;
    for (size_t i = 0; i < p.size(); i++) {
        const char c = p[i];
        if (c != '\\' || i + 1 >= p.size()) {
            in_class = c == '[' ? true : c == ']' ? false : in_class;
            out += c;
            continue;
        }
        const char e = p[++i];
        const char * cls = e == 'd' ? "0-9" : e == 'w' ? "a-zA-Z0-9_" : e == 's' ? " \\t\\n\\r\\x0B\\x0C" : nullptr;
        const char * neg = e == 'D' ? "0-9" : e == 'W' ? "a-zA-Z0-9_" : e == 'S' ? " \\t\\n\\r\\x0B\\x0C" : nullptr;
        if (cls != nullptr) {
            out += in_class ? std::string(cls) : "[" + std::string(cls) + "]";
        } else if (neg != nullptr && !in_class) {
            out += "[^" + std::string(neg) + "]";
        } else if (e == 'f' || e == 'v' || e == '0') {
            out += hex(e == 'f' ? '\f' : e == 'v' ? '\v' : '\0');
        } else if (std::ispunct((unsigned char) e) != 0 && std::string("\\\"-[]").find(e) == std::string::npos &&
                   (in_class || special.find(e) == std::string::npos)) {
            out += hex(e);  // \/ \: \. in a class ...: the character itself
        } else {
            out += '\\';
            out += e;
        }
    }
    return out;
}

// The regex subset common/json-schema-to-grammar turns into a grammar: alternation, groups
// (plain and (?:...)), . and classes, escapes, and * + ? {m,n} quantifiers. Parsed to find
// what it would drop (it accepts "any string" instead, with a warning on stderr) and what is
// costly; the grammar itself is still llama.cpp's.
class Pattern {
  public:
    explicit Pattern(const std::string & s) : s_(s) {}

    struct Problem {
        std::string why;           // empty: none
        bool        cost = false;  // enforceable, at a cost per token that grows without bound
    };

    Problem problem() {
        if (s_.size() < 2 || s_.front() != '^' || s_.back() != '$') {
            return {"is not anchored with ^ and $, so the grammar could not enforce it (a JSON schema pattern "
                    "matches anywhere: write \"^.*(" + s_ + ").*$\" if that is what you mean)"};
        }
        i_ = 1, end_ = s_.size() - 1;
        try {
            alternation();
            if (i_ != end_) {
                return {"has an unbalanced ')'"};
            }
        } catch (const std::string & why) {
            return {why};
        } catch (const Costly & c) {
            return {c.why, true};
        }
        return {};
    }

  private:
    struct Part {
        bool    nullable = false;
        int64_t reps     = 1;  // the largest product of counts inside (a{3}){4}: 12
    };
    struct Costly {
        std::string why;
    };

    char peek() const { return i_ < end_ ? s_[i_] : '\0'; }

    Part alternation() {
        Part p = sequence();
        while (peek() == '|') {
            i_++;
            const Part q = sequence();
            p.nullable   = p.nullable || q.nullable;
            p.reps       = std::max(p.reps, q.reps);
        }
        return p;
    }

    Part sequence() {
        Part seq{true};
        while (i_ < end_ && peek() != '|' && peek() != ')') {
            const size_t start = i_;
            Part         a     = atom();
            const auto [lo, hi] = quantifier();
            if (hi != 1 && a.nullable) {
                throw Costly{"repeats a part that can match nothing (" + s_.substr(start, i_ - start) +
                      "): its grammar keeps one live state per way of matching, checked for every token, so "
                      "its cost grows with the count; write the repetition on the non-empty part instead "
                      "(a{0,n} rather than (a?){n})"};
            }
            // llama.cpp refuses a grammar past kMaxRepetition of nested counts together: checked
            // as each count closes over what it repeats, so the product never grows past it
            const int64_t reps = a.reps * std::max<int64_t>(1, std::max(lo, hi));
            if (reps > kMaxRepetition) {
                throw Costly{"repeats more than " + std::to_string(kMaxRepetition) + " times in all (" +
                             s_.substr(start, i_ - start) + "), past what llama.cpp's grammar accepts"};
            }
            seq.nullable = seq.nullable && (a.nullable || lo == 0);
            seq.reps     = std::max(seq.reps, reps);
        }
        return seq;
    }

    Part atom() {
        const char c = s_[i_++];
        if (c == '(') {
            if (peek() == '?') {
                if (i_ + 1 >= end_ || s_[i_ + 1] != ':') {
                    throw std::string("uses group syntax the grammar cannot express ((?=, (?!, (?<, named groups, flags)");
                }
                i_ += 2;
            }
            if (++depth_ > 100) {
                throw std::string("nests groups deeper than 100");
            }
            Part p = alternation();
            if (peek() != ')') {
                throw std::string("has an unclosed '('");
            }
            i_++, depth_--;
            return p;
        }
        if (c == ')' || c == '*' || c == '+' || c == '?' || c == '{') {
            throw std::string("has a quantifier with nothing to repeat");
        }
        if (c == ']' || c == '}') {
            throw std::string("has a stray '") + c + "' (write \\" + c + " for the character)";
        }
        if (c == '^' || c == '$') {
            throw std::string("has an anchor inside it: the grammar supports ^ and $ only at its ends");
        }
        if (c == '[') {
            klass();
        } else if (c == '\\') {
            escape(false);
        }
        return Part{false};
    }

    // The quantifier after an atom: (lo, hi), hi -1 unbounded.
    std::pair<int64_t, int64_t> quantifier() {
        const char c = peek();
        std::pair<int64_t, int64_t> q{1, 1};
        if (c == '*' || c == '+' || c == '?') {
            i_++;
            q = c == '*' ? std::make_pair<int64_t, int64_t>(0, -1)
              : c == '+' ? std::make_pair<int64_t, int64_t>(1, -1)
                         : std::make_pair<int64_t, int64_t>(0, 1);
        } else if (c == '{') {
            const size_t close = s_.find('}', i_);
            if (close == std::string::npos || close >= end_) {
                throw std::string("has an unterminated {");
            }
            const std::string body = s_.substr(i_ + 1, close - i_ - 1);
            if (body.empty()) {
                throw std::string("has an empty count {}");
            }
            const size_t comma = body.find(',');
            auto number = [&](const std::string & t, int64_t none) -> int64_t {
                if (t.empty()) {
                    return none;
                }
                if (!std::all_of(t.begin(), t.end(), [](char d) { return std::isdigit((unsigned char) d) != 0; }) ||
                    t.size() > 9) {
                    throw "has an invalid count {" + body + "}";
                }
                return std::atoll(t.c_str());
            };
            q.first  = number(comma == std::string::npos ? body : body.substr(0, comma), 0);
            q.second = comma == std::string::npos ? q.first : number(body.substr(comma + 1), -1);
            i_ = close + 1;
        } else {
            return q;
        }
        if (peek() == '?' || peek() == '+') {
            throw std::string("has a lazy or possessive quantifier, which a grammar cannot express");
        }
        return q;
    }

    void klass() {
        if (peek() == '^') {
            i_++;
        }
        for (bool first = true; i_ < end_; first = false) {
            const char c = s_[i_++];
            if (c == ']' && !first) {
                return;
            }
            if (c == '\\') {
                escape(true);
            }
        }
        throw std::string("has an unterminated [");
    }

    void escape(bool in_class) {
        if (i_ >= end_) {
            throw std::string("ends with a lone backslash");
        }
        // what common/json-schema-to-grammar reads (gbnf_escape_length, and escaped specials
        // outside a class), once spell_escapes() has rewritten the rest
        const char c = s_[i_++];
        const int  n_hex = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
        if (n_hex > 0) {
            for (int k = 0; k < n_hex; k++, i_++) {
                if (i_ >= end_ || std::isxdigit((unsigned char) s_[i_]) == 0) {
                    throw std::string("has an invalid \\") + c + " escape";
                }
            }
            return;
        }
        if (std::string("trn\\\"[]-").find(c) != std::string::npos ||
            (!in_class && std::string("^$.[]()|{}*+?").find(c) != std::string::npos)) {
            return;
        }
        throw std::string("uses an escape the grammar cannot express (\\") + c + ")";
    }

    const std::string & s_;
    size_t              i_ = 0, end_ = 0;
    int                 depth_ = 0;
};

// Keywords the converter (common/json-schema.cpp) reads; anything else that constrains a
// value is dropped by it, so strict refuses it.
const std::set<std::string> kUnenforced = {
    "not", "if", "then", "else", "dependentRequired", "dependentSchemas", "dependencies", "patternProperties",
    "propertyNames", "contains", "minContains", "maxContains", "uniqueItems", "multipleOf", "minProperties",
    "maxProperties", "unevaluatedProperties", "unevaluatedItems",
};

struct Walk {
    bool   strict;
    size_t enum_total = 0;

    [[noreturn]] void refuse(const std::string & path, const std::string & why) const { fail(path + ": " + why); }

    void schema(const json & s, const std::string & path) {
        if (!s.is_object()) {
            return;  // true/false schemas and what the converter itself refuses
        }
        if (const json * e = find(s, "enum"); e != nullptr && e->is_array()) {
            enum_total += e->size();
            if (e->size() > kMaxEnumValues || enum_total > kMaxEnumValuesTotal) {
                refuse(path + ".enum", "has " + std::to_string(e->size()) + " values (" + std::to_string(enum_total) +
                                           " in the schema); a grammar keeps every value that still fits alive at "
                                           "once, so at most " + std::to_string(kMaxEnumValues) + " per enum and " +
                                           std::to_string(kMaxEnumValuesTotal) + " in all are accepted");
            }
        }
        if (const json * p = find(s, "pattern"); p != nullptr && p->is_string()) {
            const std::string pattern = p->get<std::string>();
            if (const auto trouble = Pattern(pattern).problem(); !trouble.why.empty() && (strict || trouble.cost)) {
                refuse(path + ".pattern", "\"" + pattern + "\" " + trouble.why);  // tools: cost only
            }
            if (strict && (s.contains("minLength") || s.contains("maxLength"))) {
                refuse(path, "\"pattern\" beside \"minLength\"/\"maxLength\": the grammar follows the pattern only; "
                             "put the length in the pattern ({m,n})");
            }
        }
        for (const char * count : {"minLength", "maxLength", "minItems", "maxItems"}) {
            const json * n = find(s, count);
            if (n != nullptr && n->is_number() && n->get<double>() > kMaxRepetition) {
                refuse(path + "." + count, "is more than " + std::to_string(kMaxRepetition) +
                                               ", past the repetitions llama.cpp's grammar accepts");
            }
        }
        if (strict) {
            keywords(s, path);
        }
        children(s, path);
    }

    void keywords(const json & s, const std::string & path) const {
        for (const auto & [key, value] : s.items()) {
            if (kUnenforced.count(key) != 0 && !(key == "uniqueItems" && value == false)) {
                refuse(path + "." + key, "cannot be enforced by a grammar");
            }
        }
        if (const json * f = find(s, "format"); f != nullptr && f->is_string()) {
            static const std::set<std::string> known = {"date", "time", "date-time", "uuid", "uuid1", "uuid2",
                                                        "uuid3", "uuid4", "uuid5"};
            if (known.count(f->get<std::string>()) == 0) {
                refuse(path + ".format", "\"" + f->get<std::string>() +
                                             "\" cannot be enforced by a grammar (date, time, date-time and uuid can; "
                                             "a pattern can say more)");
            }
        }
        const json * type = find(s, "type");
        const bool   number = type != nullptr && (*type == "number" || (type->is_array() && std::find(type->begin(), type->end(), "number") != type->end()));
        for (const char * bound : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
            if (number && s.contains(bound)) {
                refuse(path + "." + bound, "bounds only integers in a grammar; use \"type\": \"integer\", or drop it");
            }
        }
    }

    void children(const json & s, const std::string & path) {
        for (const char * key : {"properties", "$defs", "definitions"}) {
            if (const json * m = find(s, key); m != nullptr && m->is_object()) {
                for (const auto & [name, sub] : m->items()) {
                    schema(sub, path + "." + key + "." + name);
                }
            }
        }
        for (const char * key : {"items", "additionalProperties"}) {
            if (const json * sub = find(s, key); sub != nullptr && sub->is_object()) {
                schema(*sub, path + "." + key);
            }
        }
        for (const char * key : {"anyOf", "oneOf", "allOf", "prefixItems", "items"}) {
            if (const json * list = find(s, key); list != nullptr && list->is_array()) {
                for (size_t i = 0; i < list->size(); i++) {
                    schema((*list)[i], path + "." + key + "[" + std::to_string(i) + "]");
                }
            }
        }
    }
};

// Every "pattern" string in the schema, at any depth, respelled (spell_escapes).
void respell(json & s) {
    if (s.is_object()) {
        for (auto & [key, value] : s.items()) {
            if (key == "pattern" && value.is_string()) {
                value = spell_escapes(value.get<std::string>());
            } else {
                respell(value);
            }
        }
    } else if (s.is_array()) {
        for (json & v : s) {
            respell(v);
        }
    }
}

}  // namespace

void check_grammar_limits(const json & schema, const std::string & where, bool strict) {
    Walk w{strict};
    w.schema(schema, where);
}

json enforceable_schema(const json & schema, const std::string & where) {
    json out = schema;
    respell(out);
    check_grammar_limits(out, where, true);
    return out;
}

}  // namespace el
