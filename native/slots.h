// slots.h -- several conversations kept warm on one context: which slot (llama.cpp
// sequence) serves a call, and the host-memory cache of conversations evicted from one.
//
// Invariant (isolation): every slot and every host-memory entry belongs to one owner, the
// session that wrote it ("" is the pool of calls that name no session), and a call never
// reuses, trims or restores state of another owner: a slot changes owner only after its
// state was saved to host memory under the old owner and its cache cleared. Routing is
// deterministic (the same history of calls picks the same slots), and a call that fails
// after routing puts back the host-memory copy it consumed. A slot serves one call at a
// time: from pick() to settle() it is busy, and no other call routes to, evicts, restores
// into or forgets it.
#pragma once

#include "json_args.h"
#include "prompt_cache.h"

#include <cstdint>
#include <cstddef>
#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace el {

class Slots {
  public:
    struct Slot {
        std::unique_ptr<PromptCache> cache;
        std::string                  session;    // the owner: the session pinned here ("" = the pool)
        uint64_t                     last_used = 0;
        bool                         busy      = false;  // a call runs on it (pick .. settle)
        bool                         forget    = false;  // el_forget came while busy: clear at settle
        std::unique_ptr<PromptCache::Saved> taken;       // host copy its call restored, until settle
    };

    static constexpr size_t kBusy = SIZE_MAX;  // pick(): this session's slot serves another call

    Slots(llama_context * ctx, MemoryKind kind, int32_t n_swa, int32_t n_checkpoints, int32_t n_seq,
          int32_t state_cache_mib);

    // The slot that serves a call with this session ("" for none) and prompt; may evict
    // another conversation to host memory and restore this owner's from it, in which
    // case `restored_from_host` is set. The slot is busy until settle(). kBusy when the
    // session's slot is busy with another call: try again once it is free. Callers keep
    // fewer calls running than there are slots, so a free slot always exists otherwise.
    size_t pick(const std::string & session, const std::vector<llama_token> & prompt, bool & restored_from_host);

    // Whether pick() would give this session a slot now (rather than kBusy), given that
    // fewer calls run than there are slots: false only while its pinned slot is busy.
    bool can_pick(const std::string & session) const;

    // The call on `slot` ended: on failure (its slot's cache was cleared), the host-memory
    // copy it restored is put back and the slot is unpinned, so that the conversation is
    // restored again by its next call; on success that copy is dropped. The slot is free.
    void settle(size_t slot, bool ok);

    PromptCache & cache(size_t i) { return *slots_[i].cache; }
    size_t        size() const { return slots_.size(); }

    // Drop what is cached for one session (its slot and host copies), or all when NULL; a
    // busy slot is cleared when its call settles.
    void forget(const char * session);

    // Clear every slot's memory (before the context is freed).
    void clear_caches();

    // Release host-side state only, touching no memory of the context (dead handles).
    void release_host_state();

    // {"n_tokens", "n_checkpoints", "checkpoint_bytes", "n_slots", "slots", "host_cache"}.
    json stats() const;

  private:
    size_t route_by_prefix(const std::vector<llama_token> & prompt) const;
    size_t evict(const std::string & session, const std::vector<llama_token> & prompt, bool & restored_from_host);
    void   stash(const Slot & victim);
    void   put_back(PromptCache::Saved saved);
    bool   unstash(size_t slot, const std::string & session, const std::vector<llama_token> & prompt);
    void drop_host_cache(const char * session);

    std::vector<Slot>              slots_;
    uint64_t                       clock_ = 0;
    size_t                         host_limit_;
    // Conversations evicted from their slot, most recent first, bounded by host_limit_.
    std::deque<PromptCache::Saved> host_cache_;
    size_t                         host_bytes_ = 0;
};

}  // namespace el
