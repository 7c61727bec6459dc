// slots.h -- several conversations kept warm on one context: which slot (llama.cpp
// sequence) serves a call, and the host-memory cache of conversations evicted from one.
//
// Invariant: routing is deterministic (the same history of calls picks the same slots),
// a session's slot serves only that session's calls, and a conversation leaves its slot
// only by being stashed to host memory (when it fits) or explicitly forgotten.
#pragma once

#include "json_args.h"
#include "prompt_cache.h"

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace el {

class Slots {
  public:
    struct Slot {
        std::unique_ptr<PromptCache> cache;
        std::string                  session;    // pinned by the "session" option, if any
        uint64_t                     last_used = 0;
    };

    Slots(llama_context * ctx, MemoryKind kind, int32_t n_swa, int32_t n_checkpoints, int32_t n_seq,
          int32_t state_cache_mib);

    // The slot that serves a call with this session (may be empty) and prompt; may
    // evict another conversation to host memory and restore one from it, in which
    // case `restored_from_host` is set.
    size_t pick(const std::string & session, const std::vector<llama_token> & prompt, bool & restored_from_host);

    PromptCache & cache(size_t i) { return *slots_[i].cache; }
    size_t        size() const { return slots_.size(); }

    // Drop what is cached for one session (its slot and host copies), or all when NULL.
    void forget(const char * session);

    // Clear every slot's memory (before the context is freed).
    void clear_caches();

    // Release host-side state only, touching no memory of the context (dead handles).
    void release_host_state();

    // {"n_tokens", "n_checkpoints", "checkpoint_bytes", "n_slots", "slots", "host_cache"}.
    json stats() const;

  private:
    void stash(const Slot & victim);
    bool unstash(Slot & slot, const std::string & session, const std::vector<llama_token> & prompt);
    void drop_host_cache(const char * session);

    std::vector<Slot>              slots_;
    uint64_t                       clock_ = 0;
    size_t                         host_limit_;
    // Conversations evicted from their slot, most recent first, bounded by host_limit_.
    std::deque<PromptCache::Saved> host_cache_;
    size_t                         host_bytes_ = 0;
};

}  // namespace el
