// prompt_cache.h -- which tokens one sequence's memory holds, and how to reuse them.
//
// Invariant (the one this product stands on): the mirror of tokens is appended to only
// after llama_decode succeeds and is cut whenever the memory is, so it never claims more
// than the memory really holds; reuse trims only where a trim is exact (dense caches,
// sliding-window caches still holding the window), else restores a checkpoint or starts
// afresh. A reused prefix therefore computes what a fresh evaluation would.
#pragma once

#include "llama.h"
#include "owner.h"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace el {

// How many leading tokens two sequences share.
size_t common_prefix(const std::vector<llama_token> & a, const std::vector<llama_token> & b);

// A saved copy of the part of a sequence's memory that cannot be trimmed back
// (the sliding-window cache, a recurrent state), taken after n_tokens tokens.
struct Checkpoint {
    size_t               n_tokens;
    std::vector<uint8_t> data;
};

// Bytes the checkpoints hold.
size_t checkpoint_bytes(const std::deque<Checkpoint> & checkpoints);

// How a model's memory can be rolled back to a prefix.
enum class MemoryKind {
    Trimmable,      // dense KV cache: seq_rm is exact
    SlidingWindow,  // SWA cache: seq_rm succeeds but the window may have evicted what we need
    // SWA with a full-size cache (swa_full): seq_rm is exact on what was evaluated in place,
    // but a saved state (llama_state_seq_get_data) leaves out the cells already outside the
    // window, so a copy restored from host memory, the disk tier or another slot holds only
    // the window: it serves a prompt that extends it, or a checkpoint (issue 54: on Gemma 4,
    // window 32 in the tiny model, a restored prefix trimmed back differed from a fresh one).
    FullWindow,
    Recurrent,      // recurrent or hybrid: the state cannot be trimmed per token
};

// How many tokens of `prompt` prepare() would keep from a sequence holding `tokens` with these
// checkpoints (at most: a sliding window may keep more), so that routing can compare sources.
size_t reusable(MemoryKind kind, const std::vector<llama_token> & tokens, const std::deque<Checkpoint> & checkpoints,
                const std::vector<llama_token> & prompt);

// Test hooks only: reuse without the checks that make it exact.
enum class UnsafeReuse {
    None,
    TrustSeqRm,  // believe llama_memory_seq_rm's return value, as a naive shim does
    Corrupt,     // re-evaluate the reused prefix in reverse order, mirror unchanged
};

class PromptCache {
  public:
    PromptCache(llama_context * ctx, llama_seq_id seq, MemoryKind kind, int32_t n_swa, int32_t max_checkpoints)
        : ctx_(ctx), seq_(seq), kind_(kind), n_swa_(n_swa), max_checkpoints_(max_checkpoints) {}

    // The tokens resident in the KV cache for this sequence, in position order.
    // Appended to only after llama_decode succeeds, so it never claims more than
    // the cache holds; a mismatch would silently corrupt every later position.
    const std::vector<llama_token> & tokens() const { return tokens_; }

    void append(const llama_token * toks, size_t n) { tokens_.insert(tokens_.end(), toks, toks + n); }

    // Forget everything. Removing a whole sequence never fails, so after this the
    // (empty) mirror and the cache agree again whatever state they were in.
    void clear();

    // Make the cache hold the longest prefix of `prompt` it can hold exactly,
    // and return its length. At least one prompt token is always left to
    // evaluate, so that sampling reads logits computed for this prompt and not
    // stale ones from the last call.
    size_t prepare(const std::vector<llama_token> & prompt, UnsafeReuse unsafe = UnsafeReuse::None);

    bool wants_checkpoints() const { return kind_ != MemoryKind::Trimmable && max_checkpoints_ > 0; }
    // Whether seq_rm may cut it (holds_exactly() still decides whether the cut kept enough).
    bool trimmable() const { return kind_ == MemoryKind::Trimmable || kind_ == MemoryKind::FullWindow; }

    // Remove the last n tokens from the cache and the mirror (a rejected draft); only where
    // the cache is trimmable. False when the memory refused, and then the caller clears.
    bool drop_last(size_t n) { return trimmable() && n <= tokens_.size() && trim_to(tokens_.size() - n); }

    llama_seq_id seq() const { return seq_; }

    // Checkpoints that eviction passes over (save_checkpoint): the first call's, at its last
    // message, its generation prompt and its prompt's end (engine.cpp's prefill).
    static constexpr size_t kKeptFirst = 3;

    // Save the rollback-proof part of the memory as it is now (after tokens().size() tokens).
    void save_checkpoint();

    size_t n_checkpoints() const { return checkpoints_.size(); }
    const std::deque<Checkpoint> & checkpoints() const { return checkpoints_; }
    MemoryKind kind() const { return kind_; }

    // reusable() for this cache, where it is: a full-size window evaluated in place may also
    // be trimmed (what a copy of it could not).
    size_t reusable(const std::vector<llama_token> & prompt) const;
    // reusable() for a copy of this cache loaded elsewhere (Slots::share).
    size_t copy_reusable(const std::vector<llama_token> & prompt) const {
        return el::reusable(kind_, tokens_, checkpoints_, prompt);
    }
    size_t checkpoint_bytes() const;

    // A host-memory copy of the whole sequence: its tokens and its full state.
    struct Saved {
        std::vector<llama_token> tokens;
        std::vector<uint8_t>     data;
        Owner                    owner;
        // The sequence's checkpoints go with it: without them a restored sliding-window or
        // recurrent conversation can be reused only by a prompt that extends all of it, and a
        // template that renders the last reply otherwise in the next call's history (Gemma 4,
        // Qwen3.5) would reuse nothing of it.
        std::deque<Checkpoint>   checkpoints;
        size_t bytes() const { return data.size() + el::checkpoint_bytes(checkpoints); }
    };

    bool save(Saved & out) const;

    // Replace this sequence by a saved one; on any doubt, leave it empty instead.
    bool load(const Saved & saved);

    // Test-only: claim that the cache holds `toks` (it holds something else).
    void relabel(std::vector<llama_token> toks) { tokens_ = std::move(toks); }

  private:
    bool   holds_exactly(size_t n) const;
    bool   trim_to(size_t n);
    size_t restore_checkpoint(size_t n);
    void   keep_prefix(size_t n);

    llama_context *          ctx_;
    llama_seq_id             seq_;
    MemoryKind               kind_;
    int32_t                  n_swa_;
    int32_t                  max_checkpoints_;
    std::vector<llama_token> tokens_;
    std::deque<Checkpoint>   checkpoints_;  // ascending n_tokens, each a prefix of tokens_
};

// From the moment the cache is touched until the call completes, any way out
// (an error, an exception, a failed or aborted llama_decode) leaves the cache
// cleared and the mirror empty, so the next call can never build on a cache
// the mirror does not describe. Disarmed only on the paths that keep them in step.
class CacheGuard {
  public:
    explicit CacheGuard(PromptCache & cache) : cache_(cache) {}
    ~CacheGuard() {
        if (armed_) {
            cache_.clear();
        }
    }
    void disarm() { armed_ = false; }
    CacheGuard(const CacheGuard &) = delete;
    CacheGuard & operator=(const CacheGuard &) = delete;

  private:
    PromptCache & cache_;
    bool          armed_ = true;
};

}  // namespace el
