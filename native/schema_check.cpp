// schema_check.cpp -- a small JSON-schema check for tool arguments; see schema_check.h.

#include "schema_check.h"

#include <cmath>

namespace el {

namespace {

bool has_type(const json & v, const std::string & type) {
    if (type == "string") return v.is_string();
    if (type == "number") return v.is_number();
    if (type == "integer") {
        // 3.0 is an integer to JSON schema, as to the JSON the model writes
        return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
    }
    if (type == "boolean") return v.is_boolean();
    if (type == "object") return v.is_object();
    if (type == "array") return v.is_array();
    if (type == "null") return v.is_null();
    return true;  // an unknown type name constrains nothing we can check
}

std::string check_type(const json & v, const json & type, const std::string & path) {
    if (type.is_string()) {
        return has_type(v, type.get<std::string>()) ? "" : path + " must be of type " + type.get<std::string>();
    }
    if (type.is_array()) {
        for (const json & t : type) {
            if (t.is_string() && has_type(v, t.get<std::string>())) {
                return "";
            }
        }
        return path + " must be of type " + dump(type);
    }
    return "";
}

std::string check_object(const json & v, const json & s, const std::string & path) {
    const json * props = find(s, "properties");
    if (const json * req = find(s, "required"); req != nullptr && req->is_array()) {
        for (const json & k : *req) {
            if (k.is_string() && !v.contains(k.get<std::string>())) {
                return path + " lacks the required \"" + k.get<std::string>() + "\"";
            }
        }
    }
    const json * extra = find(s, "additionalProperties");
    for (auto it = v.begin(); it != v.end(); ++it) {
        const std::string sub = path + "." + it.key();
        if (props != nullptr && props->is_object() && props->contains(it.key())) {
            if (std::string why = schema_mismatch(it.value(), (*props)[it.key()], sub); !why.empty()) {
                return why;
            }
        } else if (extra != nullptr && extra->is_boolean() && !extra->get<bool>()) {
            return path + " has no property \"" + it.key() + "\"";
        } else if (extra != nullptr && extra->is_object()) {
            if (std::string why = schema_mismatch(it.value(), *extra, sub); !why.empty()) {
                return why;
            }
        }
    }
    return "";
}

std::string check_array(const json & v, const json & s, const std::string & path) {
    if (const json * n = find(s, "minItems"); n != nullptr && n->is_number() && v.size() < n->get<double>()) {
        return path + " needs at least " + dump(*n) + " items";
    }
    if (const json * n = find(s, "maxItems"); n != nullptr && n->is_number() && v.size() > n->get<double>()) {
        return path + " takes at most " + dump(*n) + " items";
    }
    if (const json * items = find(s, "items"); items != nullptr && items->is_object()) {
        for (size_t i = 0; i < v.size(); i++) {
            if (std::string why = schema_mismatch(v[i], *items, path + "[" + std::to_string(i) + "]"); !why.empty()) {
                return why;
            }
        }
    }
    return "";
}

std::string check_alternatives(const json & v, const json & s, const std::string & path) {
    for (const char * key : {"anyOf", "oneOf"}) {
        const json * alts = find(s, key);
        if (alts == nullptr || !alts->is_array() || alts->empty()) {
            continue;
        }
        std::string first;
        for (const json & alt : *alts) {
            std::string why = schema_mismatch(v, alt, path);
            if (why.empty()) {
                first.clear();
                break;
            }
            if (first.empty()) {
                first = why;
            }
        }
        if (!first.empty()) {
            return path + " matches none of the allowed forms (" + first + ")";
        }
    }
    if (const json * all = find(s, "allOf"); all != nullptr && all->is_array()) {
        for (const json & sub : *all) {
            if (std::string why = schema_mismatch(v, sub, path); !why.empty()) {
                return why;
            }
        }
    }
    return "";
}

}  // namespace

std::string schema_mismatch(const json & v, const json & s, const std::string & path) {
    if (!s.is_object()) {
        return "";  // true, {} or a schema we cannot read: anything goes
    }
    if (const json * e = find(s, "enum"); e != nullptr && e->is_array()) {
        for (const json & x : *e) {
            if (x == v) {
                return check_alternatives(v, s, path);
            }
        }
        return path + " must be one of " + dump(*e) + ", not " + dump(v);
    }
    if (s.contains("const") && s["const"] != v) {
        return path + " must be " + dump(s["const"]) + ", not " + dump(v);
    }
    if (const json * t = find(s, "type")) {
        if (std::string why = check_type(v, *t, path); !why.empty()) {
            return why + ", not " + dump(v);
        }
    }
    if (v.is_number()) {
        const double x = v.get<double>();
        if (const json * lo = find(s, "minimum"); lo != nullptr && lo->is_number() && x < lo->get<double>()) {
            return path + " must be at least " + dump(*lo);
        }
        if (const json * hi = find(s, "maximum"); hi != nullptr && hi->is_number() && x > hi->get<double>()) {
            return path + " must be at most " + dump(*hi);
        }
    }
    std::string why = v.is_object() ? check_object(v, s, path) : v.is_array() ? check_array(v, s, path) : "";
    return why.empty() ? check_alternatives(v, s, path) : why;
}

}  // namespace el
