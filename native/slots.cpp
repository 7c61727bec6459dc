// slots.cpp -- slot routing and the host-memory state cache; see slots.h.

#include "slots.h"

#include <tuple>

namespace el {

Slots::Slots(llama_context * ctx, MemoryKind kind, int32_t n_swa, int32_t n_checkpoints, int32_t n_seq,
             int32_t state_cache_mib)
    : host_limit_((size_t) state_cache_mib << 20) {
    for (int32_t i = 0; i < n_seq; i++) {
        slots_.push_back(Slot{std::make_unique<PromptCache>(ctx, i, kind, n_swa, n_checkpoints), "", 0});
    }
}

// Which slot serves this call: the one pinned to its session; for a call without a
// session, the unpinned slot whose cached tokens share the longest prefix with the
// prompt (see route_by_prefix); else a slot to evict (see evict).
// Deterministic: the same history of calls always picks the same slots.
size_t Slots::pick(const std::string & session, const std::vector<llama_token> & prompt, bool & restored_from_host) {
    if (!can_pick(session)) {
        return kBusy;
    }
    size_t chosen = slots_.size();
    if (!session.empty()) {
        for (size_t i = 0; i < slots_.size(); i++) {
            if (slots_[i].session == session) {
                chosen = i;
            }
        }
    } else {
        chosen = route_by_prefix(prompt);
    }
    if (chosen == slots_.size()) {
        chosen = evict(session, prompt, restored_from_host);
    }
    slots_[chosen].last_used = ++clock_;
    slots_[chosen].busy      = true;
    return chosen;
}

bool Slots::can_pick(const std::string & session) const {
    if (session.empty()) {
        return true;
    }
    for (const Slot & slot : slots_) {
        if (slot.session == session && slot.busy) {
            return false;
        }
    }
    return true;
}

// Among the slots of the session-less pool only (a pinned slot holds another owner's
// state, which must not be reused, trimmed or even measured against this prompt), the
// one sharing the longest prefix, counting only slots the prompt shares at least half
// of (ties: the most recently used); slots_.size() if none qualifies.
size_t Slots::route_by_prefix(const std::vector<llama_token> & prompt) const {
    size_t chosen = slots_.size();
    size_t best = 0;
    for (size_t i = 0; i < slots_.size(); i++) {
        if (!slots_[i].session.empty() || slots_[i].busy) {
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
size_t Slots::evict(const std::string & session, const std::vector<llama_token> & prompt, bool & restored_from_host) {
    auto rank = [&](const Slot & x) {
        return std::make_tuple(!x.session.empty(), !x.cache->tokens().empty(), x.last_used);
    };
    size_t chosen = slots_.size();
    for (size_t i = 0; i < slots_.size(); i++) {
        if (!slots_[i].busy && (chosen == slots_.size() || rank(slots_[i]) < rank(slots_[chosen]))) {
            chosen = i;
        }
    }
    Slot & victim = slots_[chosen];
    stash(victim);
    if (victim.session != session) {
        victim.cache->clear();
        victim.session = session;
    }
    restored_from_host = unstash(chosen, session, prompt);
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
        s.session.clear();  // the next call of this session restores it again
    }
    s.taken.reset();
    s.busy = false;
    if (s.forget) {
        s.forget = false;
        s.cache->clear();
        s.session.clear();
    }
}

// Keep an evicted conversation in host memory (llama-server does the same), so that
// when it comes back its prefix is restored instead of evaluated again.
void Slots::stash(const Slot & victim) {
    if (host_limit_ == 0 || victim.cache->tokens().empty()) {
        return;
    }
    PromptCache::Saved saved;
    saved.session = victim.session;
    if (victim.cache->save(saved)) {
        put_back(std::move(saved));
    }
}

// Newest first; the oldest entries go when the budget is exceeded.
void Slots::put_back(PromptCache::Saved saved) {
    if (saved.bytes() > host_limit_) {
        return;
    }
    host_bytes_ += saved.bytes();
    host_cache_.push_front(std::move(saved));
    while (host_bytes_ > host_limit_) {
        host_bytes_ -= host_cache_.back().bytes();
        host_cache_.pop_back();
    }
}

// Restore this owner's saved conversation that shares the longest prefix with the
// prompt (at least half of it, as for slot routing), if any. The entry is held by the
// slot until its call settles, so that a failed call can put it back.
bool Slots::unstash(size_t slot, const std::string & session, const std::vector<llama_token> & prompt) {
    auto best = host_cache_.end();
    size_t best_n = 0;
    for (auto it = host_cache_.begin(); it != host_cache_.end(); ++it) {
        if (it->session != session) {
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

void Slots::drop_host_cache(const char * session) {
    for (auto it = host_cache_.begin(); it != host_cache_.end();) {
        if (session == nullptr || it->session == session) {
            host_bytes_ -= it->bytes();
            it = host_cache_.erase(it);
        } else {
            ++it;
        }
    }
}

void Slots::forget(const char * session) {
    for (auto & slot : slots_) {
        if (session == nullptr || slot.session == session) {
            if (slot.busy) {
                slot.forget = true;  // its call is using the cache: cleared when it ends
                continue;
            }
            slot.cache->clear();
            slot.session.clear();
        }
    }
    drop_host_cache(session);
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
                                {"session", slot.session.empty() ? json(nullptr) : json(slot.session)},
                                {"n_tokens", slot.cache->tokens().size()},
                                {"busy", slot.busy},
                                {"n_checkpoints", slot.cache->n_checkpoints()},
                                {"checkpoint_bytes", slot.cache->checkpoint_bytes()}});
        tokens += slot.cache->tokens().size();
        checkpoints += slot.cache->n_checkpoints();
        bytes += slot.cache->checkpoint_bytes();
    }
    return json{{"n_tokens", tokens}, {"n_checkpoints", checkpoints}, {"checkpoint_bytes", bytes},
                {"n_slots", slots_.size()}, {"slots", per_slot},
                {"host_cache", {{"entries", host_cache_.size()}, {"bytes", host_bytes_}, {"limit_bytes", host_limit_}}}};
}

}  // namespace el
