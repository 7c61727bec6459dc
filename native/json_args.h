// json_args.h -- reading the caller's JSON: typed getters whose errors name the key,
// and UserError, the one exception type that means "the request was wrong".
//
// Invariant: every value read from caller JSON goes through these getters, so a wrong
// type or an out-of-range number is always a UserError with a readable message, never
// nlohmann's own exception text and never undefined behaviour.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>

namespace el {

using json = nlohmann::ordered_json;

// A problem with what the caller sent. Everything else that is thrown is an
// internal failure; both become {"error": ...} at the ABI boundary.
struct UserError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

[[noreturn]] void fail(const std::string & msg);

// Model output is arbitrary bytes: a token can end inside a UTF-8 sequence,
// and a tiny model can emit invalid ones. Replace rather than throw.
std::string dump(const json & j);

// Parse one JSON argument of the ABI; `what` names it in the error.
json parse_json_arg(const char * text, const char * what);

// The value at `key`, or nullptr when it is absent or null.
const json * find(const json & obj, const char * key);

double      get_number(const json & obj, const char * key, double def, double lo, double hi);
int64_t     get_int(const json & obj, const char * key, int64_t def, int64_t lo, int64_t hi);
bool        get_bool(const json & obj, const char * key, bool def);
std::string get_string(const json & obj, const char * key, const std::string & def);

void reject_unknown_keys(const json & obj, const std::set<std::string> & known, const char * what);

}  // namespace el
