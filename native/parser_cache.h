// parser_cache.h -- the chat output parsers of recent calls, loaded once.
//
// A call's template hands back its output parser serialized (common_chat_params::parser);
// loading it is a JSON parse of the whole parser, tool schemas included (~5 % of a call's
// preparation on qwen2.5 with one tool). Calls with the same tools and options get the same
// string, so the loaded parser is kept, keyed by that exact string.
//
// Invariant: an entry is the load of exactly its key, so a hit returns what a load would.
#pragma once

#include "peg-parser.h"

#include <deque>
#include <string>
#include <utility>

namespace el {

class ParserCache {
  public:
    // The parser `serialized` describes (a copy of a kept one, or freshly loaded and kept).
    common_peg_arena load(const std::string & serialized);

  private:
    static constexpr size_t kKeep = 8;
    std::deque<std::pair<std::string, common_peg_arena>> recent_;  // most recently used first
};

}  // namespace el
