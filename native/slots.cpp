// slots.cpp -- slot routing and the host-memory state cache; see slots.h.

#include "slots.h"

#include <tuple>

namespace el {

Slots::Slots(llama_context * ctx, MemoryKind kind, int32_t n_swa, int32_t n_checkpoints, int32_t n_seq,
             int32_t state_cache_mib)
    : host_limit_((size_t) state_cache_mib << 20) {
    for (int32_t i = 0; i < n_seq; i++) {
        slots_.push_back(Slot{std::make_unique<PromptCache>(ctx, i, kind, n_swa, n_checkpoints), Owner{}, 0});
    }
}

// Which slot serves this call: the one pinned to its owner; for a call of a scope's pool,
// the pool's slot whose cached tokens share the longest prefix with the prompt (see
// route_by_prefix); else a slot to evict (see evict). Then, if another conversation of the
// scope holds a longer prefix of the prompt, it is copied in (share).
// Deterministic: the same history of calls always picks the same slots.
size_t Slots::pick(const Owner & owner, const std::vector<llama_token> & prompt, Picked & how) {
    if (!can_pick(owner)) {
        return kBusy;
    }
    size_t chosen = slots_.size();
    if (owner.pinned()) {
        for (size_t i = 0; i < slots_.size(); i++) {
            if (slots_[i].owner == owner) {
                chosen = i;
            }
        }
    } else {
        chosen = route_by_prefix(owner, prompt);
    }
    if (chosen == slots_.size()) {
        chosen = evict(owner, prompt, how.restored_from_host);
    }
    slots_[chosen].last_used = ++clock_;
    slots_[chosen].busy      = true;
    how.shared               = share(chosen, prompt);
    how.restored_from_disk   = disk_ != nullptr && from_disk(chosen, prompt);
    return chosen;
}

bool Slots::can_pick(const Owner & owner) const {
    if (!owner.pinned()) {
        return true;
    }
    for (const Slot & slot : slots_) {
        if (slot.owner == owner && slot.busy) {
            return false;
        }
    }
    return true;
}

// The longest prefix of the prompt (that prepare() could keep: reusable()) that another
// conversation of the slot's scope holds, in a
// slot no call runs on (a running call's cache is its own until it settles) or in host
// memory, copied into this slot when it beats what the slot holds by kMinShared tokens. The
// whole state is copied (llama.cpp copies a sequence between cache streams only whole) and
// the call's prepare() then cuts it to the shared prefix exactly as it cuts its own cache,
// checkpoints included. The source is read, never changed: the host entry stays where it
// is. What the slot held is dropped: the prompt leaves it before the copy's prefix ends, so
// prepare() would have cut it there anyway. On failure the slot is left empty, which costs
// the call only its reuse.
bool Slots::share(size_t slot, const std::vector<llama_token> & prompt) {
    Slot & dst = slots_[slot];
    size_t best = dst.cache->reusable(prompt) + kMinShared - 1;
    const Slot * from_slot = nullptr;
    const PromptCache::Saved * from_host = nullptr;
    for (const Slot & s : slots_) {
        const size_t n = &s == &dst || s.busy || !s.owner.shares_with(dst.owner) ? 0 : s.cache->copy_reusable(prompt);
        if (n > best) {
            best = n, from_slot = &s;
        }
    }
    for (const PromptCache::Saved & e : host_cache_) {
        const size_t n = !e.owner.shares_with(dst.owner) ? 0 : reusable(dst.cache->kind(), e.tokens, e.checkpoints, prompt);
        if (n > best) {
            best = n, from_slot = nullptr, from_host = &e;
        }
    }
    if (from_slot == nullptr && from_host == nullptr) {
        return false;
    }
    PromptCache::Saved copy;
    if (from_slot != nullptr && !from_slot->cache->save(copy)) {
        return false;  // the slot keeps what it held
    }
    if (!dst.cache->load(from_slot != nullptr ? copy : *from_host)) {
        return false;  // load() left the slot empty
    }
    n_shared_++;
    return true;
}

// Among the slots of this pool only (a pinned slot holds another owner's state, which a
// call may at most copy from, never take), the one sharing the longest prefix, counting
// only slots the prompt shares at least half of (ties: the most recently used);
// slots_.size() if none qualifies.
size_t Slots::route_by_prefix(const Owner & owner, const std::vector<llama_token> & prompt) const {
    size_t chosen = slots_.size();
    size_t best = 0;
    for (size_t i = 0; i < slots_.size(); i++) {
        if (slots_[i].owner != owner || slots_[i].busy) {
            continue;
        }
        const auto & toks = slots_[i].cache->tokens();
        const size_t n = common_prefix(toks, prompt);
        // A prefix counts only if it is at least half of what the slot holds: a
        // few shared template tokens must not cost another conversation its slot.
        if (2 * n < toks.size()) {
            continue;
        }
        if (n > best || (n == best && n > 0 && slots_[i].last_used > slots_[chosen].last_used)) {
            best   = n;
            chosen = i;
        }
    }
    return chosen;
}

// Take a free slot for this call: an empty slot, else the least recently used slot no
// session is pinned to, else the least recently used pinned one. Its conversation is
// saved to host memory; if it belonged to another owner, the cache is cleared before
// this call sees it, so nothing of it can be reused (nor its length observed through
// n_reused). Then this owner's best saved conversation, if any, is restored into it.
size_t Slots::evict(const Owner & owner, const std::vector<llama_token> & prompt, bool & restored_from_host) {
    auto rank = [&](const Slot & x) {
        return std::make_tuple(x.owner.pinned(), !x.cache->tokens().empty(), x.last_used);
    };
    size_t chosen = slots_.size();
    for (size_t i = 0; i < slots_.size(); i++) {
        if (!slots_[i].busy && (chosen == slots_.size() || rank(slots_[i]) < rank(slots_[chosen]))) {
            chosen = i;
        }
    }
    Slot & victim = slots_[chosen];
    stash(victim);
    if (victim.owner != owner) {
        victim.cache->clear();
        victim.owner = owner;
    }
    restored_from_host = unstash(chosen, owner, prompt);
    return chosen;
}

void Slots::settle(size_t slot, bool ok) {
    Slot & s = slots_[slot];
    if (s.forget) {
        s.taken.reset();  // forgotten while the call ran: nothing of it goes back to host memory
    }
    if (!ok) {
        if (s.taken != nullptr) {
            put_back(std::move(*s.taken));
        }
        s.owner.session.clear();  // the next call of this session restores it again
    }
    s.taken.reset();
    s.busy = false;
    if (s.forget) {
        s.forget = false;
        s.cache->clear();
        s.owner.session.clear();
    }
}

// The disk tier's longest prefix of the prompt this slot's owner may read, when it beats what
// the slot now holds by kMinShared tokens: loaded as a shared copy is (share()).
bool Slots::from_disk(size_t slot, const std::vector<llama_token> & prompt) {
    Slot & dst = slots_[slot];
    const size_t have = dst.cache->reusable(prompt);
    std::optional<PromptCache::Saved> saved = disk_->best(dst.owner, prompt, have + kMinShared - 1, dst.cache->kind());
    return saved && dst.cache->load(*saved);
}

void Slots::persist() {
    if (disk_ == nullptr) {
        return;
    }
    for (const Slot & slot : slots_) {
        PromptCache::Saved saved;
        saved.owner = slot.owner;
        if (!slot.cache->tokens().empty() && slot.cache->save(saved)) {
            disk_->put(saved);
        }
    }
    for (const PromptCache::Saved & e : host_cache_) {
        disk_->put(e);
    }
}

// Keep an evicted conversation in host memory (llama-server does the same), so that
// when it comes back its prefix is restored instead of evaluated again.
void Slots::stash(const Slot & victim) {
    if ((host_limit_ == 0 && disk_ == nullptr) || victim.cache->tokens().empty()) {
        return;
    }
    PromptCache::Saved saved;
    saved.owner = victim.owner;
    if (victim.cache->save(saved)) {
        put_back(std::move(saved));
    }
}

// Newest first; the oldest entries go when the budget is exceeded.
// What the budget pushes out goes to the disk tier, if any.
void Slots::put_back(PromptCache::Saved saved) {
    if (saved.bytes() > host_limit_) {
        if (disk_ != nullptr) {
            disk_->put(saved);
        }
        return;
    }
    host_bytes_ += saved.bytes();
    host_cache_.push_front(std::move(saved));
    while (host_bytes_ > host_limit_) {
        if (disk_ != nullptr) {
            disk_->put(host_cache_.back());
        }
        host_bytes_ -= host_cache_.back().bytes();
        host_cache_.pop_back();
    }
}

// Restore this owner's saved conversation that shares the longest prefix with the
// prompt (at least half of it, as for slot routing), if any. The entry is held by the
// slot until its call settles, so that a failed call can put it back.
bool Slots::unstash(size_t slot, const Owner & owner, const std::vector<llama_token> & prompt) {
    auto best = host_cache_.end();
    size_t best_n = 0;
    for (auto it = host_cache_.begin(); it != host_cache_.end(); ++it) {
        if (it->owner != owner) {
            continue;
        }
        const size_t n = common_prefix(it->tokens, prompt);
        if (n > best_n && 2 * n >= it->tokens.size()) {
            best_n = n;
            best   = it;
        }
    }
    if (best == host_cache_.end()) {
        return false;  // the slot keeps this owner's tokens: prepare() still reuses any prefix they share
    }
    auto & taken = slots_[slot].taken;
    taken = std::make_unique<PromptCache::Saved>(std::move(*best));
    host_bytes_ -= taken->bytes();
    host_cache_.erase(best);
    return slots_[slot].cache->load(*taken);
}

bool Slots::matches(const Owner & of, const Owner * owner, bool whole_scope) const {
    return owner == nullptr || (whole_scope ? of.scoped == owner->scoped && of.scope == owner->scope : of == *owner);
}

void Slots::forget(const Owner * owner, bool whole_scope) {
    for (auto & slot : slots_) {
        if (matches(slot.owner, owner, whole_scope)) {
            if (slot.busy) {
                slot.forget = true;  // its call is using the cache: cleared when it ends
                continue;
            }
            slot.cache->clear();
            slot.owner = Owner{};
        }
    }
    for (auto it = host_cache_.begin(); it != host_cache_.end();) {
        if (matches(it->owner, owner, whole_scope)) {
            host_bytes_ -= it->bytes();
            it = host_cache_.erase(it);
        } else {
            ++it;
        }
    }
    if (disk_ != nullptr) {
        disk_->forget(owner, whole_scope);  // or the next handle, or this one, restores it
    }
}

void Slots::clear_caches() {
    for (Slot & slot : slots_) {
        slot.cache->clear();
    }
}

void Slots::release_host_state() {
    slots_.clear();  // checkpoints are host buffers; the cache itself is not touched
    host_cache_.clear();
    host_bytes_ = 0;
}

json Slots::stats() const {
    json per_slot = json::array();
    size_t tokens = 0, checkpoints = 0, bytes = 0;
    for (size_t i = 0; i < slots_.size(); i++) {
        const auto & slot = slots_[i];
        per_slot.push_back(json{{"slot", i},
                                {"session", slot.owner.pinned() ? json(slot.owner.session) : json(nullptr)},
                                {"scope", slot.owner.scoped ? json(slot.owner.scope) : json(nullptr)},
                                {"n_tokens", slot.cache->tokens().size()},
                                {"busy", slot.busy},
                                {"n_checkpoints", slot.cache->n_checkpoints()},
                                {"checkpoint_bytes", slot.cache->checkpoint_bytes()}});
        tokens += slot.cache->tokens().size();
        checkpoints += slot.cache->n_checkpoints();
        bytes += slot.cache->checkpoint_bytes();
    }
    return json{{"n_tokens", tokens}, {"n_checkpoints", checkpoints}, {"checkpoint_bytes", bytes},
                {"n_slots", slots_.size()}, {"slots", per_slot}, {"n_shared", n_shared_},
                {"disk", disk_ != nullptr ? disk_->stats() : json(nullptr)},
                {"host_cache", {{"entries", host_cache_.size()}, {"bytes", host_bytes_}, {"limit_bytes", host_limit_}}}};
}

}  // namespace el
