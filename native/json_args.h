// json_args.h -- reading the caller's JSON: typed getters whose errors name the key,
// each a UserError (error.h: EL_E_INVALID, or EL_E_UNKNOWN_KEY for a key not known).
//
// Invariant: every value read from caller JSON goes through these getters, so a wrong
// type or an out-of-range number is always a UserError with a readable message, never
// nlohmann's own exception text and never undefined behaviour.
#pragma once

#include "error.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>

namespace el {

using json = nlohmann::ordered_json;

// A problem with what the caller sent (EL_E_INVALID; error.h has the other classes).
[[noreturn]] void fail(const std::string & msg);

// Model output is arbitrary bytes: a token can end inside a UTF-8 sequence,
// and a tiny model can emit invalid ones. Replace rather than throw.
std::string dump(const json & j);

// How deeply arrays and objects may nest in any JSON the library reads: the caller's
// messages, tools, options and config, and the JSON text of tool-call arguments. nlohmann's
// parser does not recurse, but copying, serialising and the chat template's conversions do,
// and ~60,000 levels overflowed the calling thread's stack. 512 leaves every real document
// room and keeps the deepest walk far inside a 512 KiB stack.
constexpr size_t kMaxJsonDepth = 512;

// Where the JSON string that opens at s[at] ('"') ends (its closing quote); npos if the text
// ends first.
size_t json_string_end(std::string_view s, size_t at);

// Throws UserError naming `what` when `text` nests deeper than kMaxJsonDepth (strings are
// skipped; the text need not be valid JSON: the parser says what else is wrong).
void check_depth(std::string_view text, const std::string & what);

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
