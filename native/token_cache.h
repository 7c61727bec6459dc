// token_cache.h -- tokenizing a prompt at the cost of what is new in it.
//
// A call's prompt is usually the previous prompt plus a few messages, yet tokenizing it
// from scratch costs O(conversation): ~25 ms at 4k tokens on 2 cores. llama.cpp's
// tokenizer first cuts the text at special tokens and then tokenizes each piece of plain
// text on its own, so the tokens of a text up to the end of a special token do not depend
// on what follows it. The cache keeps the last prompts with their tokens and the places
// where a special token ends ("cuts"); a new text that shares a byte prefix with one of
// them reuses its tokens up to the last cut inside that prefix and tokenizes only the rest.
//
// Invariant: tokenize(text) returns exactly tokenize_prompt(vocab, text), whatever the
// history. Tokens are reused only up to a cut that lies at least the longest special
// token's length before the first differing byte, so every decision the tokenizer makes
// before the cut reads identical bytes in both texts; cuts are taken only after special
// tokens that do not strip the whitespace to their right, and only where every token
// before them was seen to spell the text byte for byte. Entries are kept per session:
// a call never gains from another session's prompts (though they share the kKeep places).
#pragma once

#include "llama.h"

#include <array>
#include <cstddef>
#include <deque>
#include <string>
#include <utility>
#include <vector>

namespace el {

// The prompt's tokens as llama.cpp makes them: special tokens parsed, BOS added where the
// vocabulary wants one, a BOS written by the template and added again kept once.
std::vector<llama_token> tokenize_prompt(const llama_vocab * vocab, const std::string & text);

class TokenCache {
  public:
    explicit TokenCache(const llama_vocab * vocab);

    struct Stats {
        size_t n_reused    = 0;  // tokens taken from a cached prompt
        double ms_tokenize = 0;  // time spent tokenizing (and finding cuts)
    };

    // Tokens of `text` for `session`; `stats`, when given, accumulates what this call did.
    // `ignore_edits` (a test hook) takes the last prompt as if the new one only extended
    // it, not comparing their bytes: the fault the differential test must catch.
    std::vector<llama_token> tokenize(const std::string & session, const std::string & text, Stats * stats = nullptr,
                                      bool ignore_edits = false);

    // How many leading tokens of `text`, which must be the last prompt tokenized for `session`,
    // spell its first `byte` bytes (or end just before the token that crosses that byte).
    // SIZE_MAX where the cache cannot tell cheaply: no cut before `byte`, tokens that do not
    // spell the text, or more than a few hundred tokens between the cut and `byte`.
    size_t tokens_before(const std::string & session, const std::string & text, size_t byte) const;

    // The prompts tokenized since the last commit() or rollback() are pending: later calls of
    // tokenize() and tokens_before() use them, but they enter the kept prompts, and push the
    // oldest ones out, only at commit(). rollback() drops them, so a request that is refused
    // after it was tokenized leaves the cache as it found it.
    void commit();
    void rollback() { pending_.clear(); }

    // Drops the prompts of `session` (every session's when null).
    void forget(const char * session);

    // A number of tokens that tokenizing `text` cannot go below, found without tokenizing:
    // every byte the vocabulary was seen to spell (at construction: each ASCII byte, and the
    // bytes of multi-byte UTF-8 together) is spelled by a token, and no token spells more than
    // the longest piece in the vocabulary (whitespace is left out: a special token may strip
    // it). 0 for vocabularies whose tokenizer may rewrite the text first (WPM, UGM, RWKV).
    size_t min_tokens(const std::string & text) const;

  private:
    struct Entry {
        std::string                          session;
        std::string                          text;
        std::vector<llama_token>             tokens;
        std::vector<std::pair<size_t, size_t>> cuts;  // (byte offset, tokens before it), increasing
    };

    // Extend `e.cuts` over e.tokens[from_token..] starting at byte `from_byte`; stops at
    // the first token whose spelling does not match the text (no cuts after it).
    void find_cuts(Entry & e, size_t from_byte, size_t from_token) const;

    static constexpr size_t kKeep = 8;  // prompts remembered (each call adds one or two)
    static constexpr size_t kMaxWalk = 256;  // tokens tokens_before spells out past a cut

    const llama_vocab * vocab_;
    size_t              max_special_len_ = 0;  // bytes of the longest special token
    size_t              max_piece_len_   = 0;  // bytes of the longest piece (0: no bound known)
    std::array<bool, 256> spelled_{};            // bytes a token is sure to spell (min_tokens counts these)
    bool                enabled_         = true;
    std::deque<Entry>   recent_;              // most recently used first
    std::deque<Entry>   pending_;             // since the last commit, newest first
};

}  // namespace el
