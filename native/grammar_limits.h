// grammar_limits.h -- what a JSON schema may ask of a grammar: each keyword either enforced
// by the grammar llama.cpp builds from it, or refused before it is built, naming the schema's
// path; and nothing whose grammar costs more than a bounded amount per token.
//
// Invariant: a schema that passes converts (common/json-schema-to-grammar) with no keyword
// dropped and no warning, and the grammar's token choice stays cheap: no regex repeats a part
// that can match nothing (`(a?){200}` keeps ~n grammar stacks alive, each token checked against
// all of them: 40 s a token at n = 200 on smollm2, unbounded at 2000, all under the handle's
// lock), no repetition count beyond llama.cpp's own bound (its parser refuses those, printing
// the grammar to stderr), no enum so large that its alternatives are live stacks together
// (10,000 values: seconds a token; 1,024 on qwen2.5: 0.3 s a token at worst).
//
// Two strengths. A response_format is `strict`: everything is refused that the grammar would
// not enforce (an unanchored or unsupported pattern, pattern beside minLength/maxLength, an
// unknown format, bounds on non-integers, keywords the converter ignores). A tool's parameters
// are checked for cost only: clients send real tool lists with annotations the converter drops,
// and a tool call is checked against its schema after it is written (schema_check.h).
#pragma once

#include "json_args.h"

#include <string>

namespace el {

// Throws (json_args.h's fail) with "WHERE.PATH: why" when the schema asks what the grammar
// cannot enforce (strict) or cannot enforce cheaply.
void check_grammar_limits(const json & schema, const std::string & where, bool strict);

// A response_format's schema as its grammar will enforce it: the escapes the converter does not
// read (\d, \w, \s, \/ ...) respelled as classes and \xHH, then checked strictly.
json enforceable_schema(const json & schema, const std::string & where);

// The bounds, for the header and the tests.
constexpr size_t kMaxEnumValues      = 1024;  // per enum
constexpr size_t kMaxEnumValuesTotal = 2048;  // in one schema
constexpr int    kMaxRepetition      = 2000;  // a {m,n} count, and the product of nested ones (llama.cpp's own bound)

}  // namespace el
