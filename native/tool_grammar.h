// tool_grammar.h -- the grammars that make a tool call valid by construction: the
// forced call (tool_choice "required" or a named function) and the lazy grammar for a
// call written as bare JSON at the start of the output (tool_choice "auto").
//
// Invariant: a lazy trigger fires only on text the grammar itself accepts, so the
// replay of the triggering tokens into the grammar can never fail; and once the
// grammar is active the output is exactly one call (or one list of calls) naming an
// offered tool with arguments that match its schema, then the end of the output.
#pragma once

#include "json_args.h"
#include "sampling.h"

#include <string>

namespace el {

// GBNF for {"name": N, "arguments": <N's schema>}, N one of the tools (or only `only`),
// also a list of them when `parallel`.
std::string forced_call_grammar(const json & tools, const std::string & only, bool parallel);

// GBNF for a response_format offered beside tools (tool_choice "auto"): the output is
// a call in the template's own syntax (`template_grammar`, its tool-call grammar, may be
// empty), a call as {"name", "arguments"} JSON (read back by recovery), or `answer`, the
// schema's grammar.
std::string call_or_answer_grammar(const json & tools, bool parallel, const std::string & template_grammar,
                                   const std::string & answer);

// Constrain a bare (or ```json fenced) JSON call at the start of the output, combined
// with the template's own lazy tool-call grammar when there is one (`template_grammar`
// and its triggers already in `s`): one grammar whose root is either, both triggers.
void add_bare_call_grammar(const json & tools, bool parallel, common_params_sampling & s);

}  // namespace el
