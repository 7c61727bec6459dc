// grammar_choice.h -- which grammar constrains a call's output: ours where the output must be
// valid by construction (a forced call, a response_format), else the template's lazy tool-call
// grammar with the bare-JSON call beside it; and whether the decode loop may read the argmax.
//
// Invariant: a grammar is chosen only from what the request and the rendered template say; one
// that cannot be built is the request's error, naming the schema.
#pragma once

#include "request.h"

#include <string>

namespace el {

// The grammar of the call's sampler (and the answer grammar beside tools and a response_format).
void choose_grammar(const llama_vocab * vocab, const json & tools, const std::string & named, bool parallel,
                    bool forced, bool tools_active, const json & schema, Request & r);

// Whether the sampler's choice is the argmax of the biased logits, and that bias.
void set_greedy(const llama_vocab * vocab, Request & r);

}  // namespace el
