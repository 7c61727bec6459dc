// slots.h -- several conversations kept warm on one context: which slot (llama.cpp
// sequence) serves a call, and the host-memory cache of conversations evicted from one.
//
// Invariant (isolation): every slot and every host-memory entry belongs to one owner, the
// session that wrote it within its trust scope (owner.h; session "" is the scope's pool of
// calls that name no session), and a call never reuses, trims or restores state of another
// owner: a slot changes owner only after its state was saved to host memory under the old
// owner and its cache cleared. The one exception is by copy and within a scope: a call may
// start from a prefix another conversation of its own scope holds (share()), copied into
// the call's own slot; the source is only read. Nothing crosses scopes. Routing is
// deterministic (the same history of calls picks the same slots), and a call that fails
// after routing puts back the host-memory copy it consumed. A slot serves one call at a
// time: from pick() to settle() it is busy, and no other call routes to, evicts, restores
// into or forgets it.
#pragma once

#include "disk_cache.h"
#include "json_args.h"
#include "owner.h"
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
        Owner                        owner;      // whose conversation it holds (a pinned session, or a scope's pool)
        uint64_t                     last_used = 0;
        bool                         busy      = false;  // a call runs on it (pick .. settle)
        bool                         forget    = false;  // el_forget came while busy: clear at settle
        std::unique_ptr<PromptCache::Saved> taken;       // host copy its call restored, until settle
    };

    static constexpr size_t kBusy = SIZE_MAX;  // pick(): this session's slot serves another call

    Slots(llama_context * ctx, MemoryKind kind, int32_t n_swa, int32_t n_checkpoints, int32_t n_seq,
          int32_t state_cache_mib);

    // How a call's slot got its state: whether this owner's own conversation came back from
    // host memory, and whether a prefix of another conversation of its scope was copied in.
    struct Picked {
        bool restored_from_host = false;
        bool shared             = false;
        bool restored_from_disk = false;  // the prefix came from the disk tier (disk_cache.h)
    };

    // The slot that serves a call of this owner with this prompt; may evict another
    // conversation to host memory and restore this owner's from it, then copy in a longer
    // prefix of the prompt held by another conversation of the same scope (share()). The
    // slot is busy until settle(). kBusy when the owner's slot is busy with another call:
    // try again once it is free. Callers keep fewer calls running than there are slots, so
    // a free slot always exists otherwise.
    size_t pick(const Owner & owner, const std::vector<llama_token> & prompt, Picked & how);

    // Whether pick() would give this owner a slot now (rather than kBusy), given that
    // fewer calls run than there are slots: false only while its pinned slot is busy.
    bool can_pick(const Owner & owner) const;

    // The call on `slot` ended: on failure (its slot's cache was cleared), the host-memory
    // copy it restored is put back and the slot is unpinned, so that the conversation is
    // restored again by its next call; on success that copy is dropped. The slot is free.
    void settle(size_t slot, bool ok);

    PromptCache & cache(size_t i) { return *slots_[i].cache; }
    size_t        size() const { return slots_.size(); }

    // Drop what is cached for one owner (its slot, host copies and disk-tier files), for every
    // owner of a scope (whole_scope), or for all when NULL; a busy slot is cleared when its
    // call settles.
    void forget(const Owner * owner, bool whole_scope = false);

    // Clear every slot's memory (before the context is freed).
    void clear_caches();

    // Give the slots a disk tier: host-memory entries pushed out by the budget, and every
    // conversation still held at persist(), are written to it; a call whose prompt it holds
    // a longer prefix of than anything in memory starts from it.
    void set_disk(std::unique_ptr<DiskCache> disk) { disk_ = std::move(disk); }

    // Write every slot's conversation and host-memory entry to the disk tier (el_close).
    void persist();

    // Release host-side state only, touching no memory of the context (dead handles).
    void release_host_state();

    // {"n_tokens", "n_checkpoints", "checkpoint_bytes", "n_slots", "slots", "host_cache",
    //  "n_shared"}.
    json stats() const;

  private:
    size_t route_by_prefix(const Owner & owner, const std::vector<llama_token> & prompt) const;
    size_t evict(const Owner & owner, const std::vector<llama_token> & prompt, bool & restored_from_host);
    void   stash(const Slot & victim);
    void   put_back(PromptCache::Saved saved);
    bool   unstash(size_t slot, const Owner & owner, const std::vector<llama_token> & prompt);
    bool   share(size_t slot, const std::vector<llama_token> & prompt);
    bool   from_disk(size_t slot, const std::vector<llama_token> & prompt);
    bool   matches(const Owner & of, const Owner * owner, bool whole_scope) const;

    // A copy pays for itself only if it saves more evaluation than the state it moves costs.
    static constexpr size_t kMinShared = 16;

    std::vector<Slot>              slots_;
    uint64_t                       clock_ = 0;
    size_t                         host_limit_;
    // Conversations evicted from their slot, most recent first, bounded by host_limit_.
    std::deque<PromptCache::Saved> host_cache_;
    size_t                         host_bytes_ = 0;
    uint64_t                       n_shared_   = 0;  // prefixes copied between conversations
    std::unique_ptr<DiskCache>     disk_;            // null: no disk tier
};

}  // namespace el
