// prompt_cache.cpp -- exact prefix reuse for one sequence; see prompt_cache.h.

#include "prompt_cache.h"

#include <algorithm>

namespace el {

size_t common_prefix(const std::vector<llama_token> & a, const std::vector<llama_token> & b) {
    return (size_t) (std::mismatch(a.begin(), a.begin() + std::min(a.size(), b.size()), b.begin()).first - a.begin());
}

void PromptCache::clear() {
    llama_memory_seq_rm(llama_get_memory(ctx_), seq_, -1, -1);
    tokens_.clear();
    checkpoints_.clear();
}

size_t PromptCache::prepare(const std::vector<llama_token> & prompt, UnsafeReuse unsafe) {
    const size_t n = std::min(common_prefix(tokens_, prompt), prompt.size() - 1);
    if (n == tokens_.size()) {
        return n;  // the new prompt extends what is cached: nothing to roll back
    }
    if (unsafe == UnsafeReuse::TrustSeqRm) {
        // Test-only: the mistake the checks below exist to prevent, so that the
        // differential test can show its oracle would catch it.
        llama_memory_seq_rm(llama_get_memory(ctx_), seq_, (llama_pos) n, -1);
        keep_prefix(n);
        return n;
    }
    if (kind_ != MemoryKind::Recurrent && trim_to(n)) {  // a full window only where it was evaluated
        return n;
    }
    return restore_checkpoint(n);
}

void PromptCache::save_checkpoint() {
    const size_t n = tokens_.size();
    if (!wants_checkpoints() || n == 0 || (!checkpoints_.empty() && checkpoints_.back().n_tokens == n)) {
        return;
    }
    const size_t size = llama_state_seq_get_size_ext(ctx_, seq_, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
    Checkpoint cp{n, std::vector<uint8_t>(size)};
    if (llama_state_seq_get_data_ext(ctx_, cp.data.data(), size, seq_, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY) != size) {
        return;  // a missing checkpoint only costs speed, never correctness
    }
    // The first call's checkpoints stay (kKeptFirst): they are where the conversation's fixed
    // part (its system prompt and tools) and its first prompt end, the places another
    // conversation of the scope, or a later process running the same script, starts from; the
    // next oldest goes instead.
    while (!checkpoints_.empty() && (int32_t) checkpoints_.size() >= max_checkpoints_) {
        const size_t keep = std::min<size_t>(kKeptFirst, checkpoints_.size() - 1);
        checkpoints_.erase(checkpoints_.begin() + (std::ptrdiff_t) keep);
    }
    checkpoints_.push_back(std::move(cp));
}

size_t reusable(MemoryKind kind, const std::vector<llama_token> & tokens, const std::deque<Checkpoint> & checkpoints,
                const std::vector<llama_token> & prompt) {
    const size_t n = prompt.empty() ? 0 : std::min(common_prefix(tokens, prompt), prompt.size() - 1);
    if (n == tokens.size() || kind == MemoryKind::Trimmable) {
        return n;
    }
    size_t best = 0;  // a sliding window may also trim near its end: not counted, to be safe
    for (const Checkpoint & cp : checkpoints) {
        best = cp.n_tokens <= n ? std::max(best, cp.n_tokens) : best;
    }
    return best;
}

size_t PromptCache::reusable(const std::vector<llama_token> & prompt) const {
    const size_t copy = el::reusable(kind_, tokens_, checkpoints_, prompt);
    if (kind_ != MemoryKind::FullWindow || prompt.empty()) {
        return copy;
    }
    const size_t    n       = std::min(common_prefix(tokens_, prompt), prompt.size() - 1);
    const llama_pos pos_min = llama_memory_seq_pos_min(llama_get_memory(ctx_), seq_);
    return pos_min <= std::max<llama_pos>(0, (llama_pos) n - n_swa_) ? n : copy;
}

size_t checkpoint_bytes(const std::deque<Checkpoint> & checkpoints) {
    size_t total = 0;
    for (const auto & c : checkpoints) {
        total += c.data.size();
    }
    return total;
}

size_t PromptCache::checkpoint_bytes() const { return el::checkpoint_bytes(checkpoints_); }

// Does the memory really hold positions [0, n) and nothing after? seq_rm
// returning true is not enough: a sliding-window cache has evicted
// positions older than its window, and a token at position n attends to
// the n_swa positions before it. (llama.cpp's server applies the same bound.)
bool PromptCache::holds_exactly(size_t n) const {
    llama_memory_t mem = llama_get_memory(ctx_);
    const llama_pos pos_max = llama_memory_seq_pos_max(mem, seq_);
    if (pos_max != (llama_pos) n - 1) {
        return false;
    }
    if ((kind_ == MemoryKind::SlidingWindow || kind_ == MemoryKind::FullWindow) && n > 0) {
        const llama_pos pos_min = llama_memory_seq_pos_min(mem, seq_);
        return pos_min <= std::max<llama_pos>(0, (llama_pos) n - n_swa_);
    }
    return true;
}

bool PromptCache::trim_to(size_t n) {
    if (!llama_memory_seq_rm(llama_get_memory(ctx_), seq_, (llama_pos) n, -1) || !holds_exactly(n)) {
        return false;
    }
    keep_prefix(n);
    return true;
}

// Roll back to the latest checkpoint at or before n: its saved state replaces
// what cannot be trimmed, and everything after it is removed. With no usable
// checkpoint, start from an empty cache.
size_t PromptCache::restore_checkpoint(size_t n) {
    llama_memory_t mem = llama_get_memory(ctx_);
    while (!checkpoints_.empty()) {
        Checkpoint & cp = checkpoints_.back();
        if (cp.n_tokens > n) {
            checkpoints_.pop_back();  // describes tokens the new prompt does not share
            continue;
        }
        const bool ok = llama_state_seq_set_data_ext(ctx_, cp.data.data(), cp.data.size(), seq_,
                                                     LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY) == cp.data.size() &&
                        llama_memory_seq_rm(mem, seq_, (llama_pos) cp.n_tokens, -1) && holds_exactly(cp.n_tokens);
        if (ok) {
            keep_prefix(cp.n_tokens);
            return cp.n_tokens;
        }
        break;
    }
    clear();
    return 0;
}

bool PromptCache::save(Saved & out) const {
    const size_t size = llama_state_seq_get_size(ctx_, seq_);
    out.data.resize(size);
    if (size == 0 || llama_state_seq_get_data(ctx_, out.data.data(), size, seq_) != size) {
        return false;
    }
    out.tokens      = tokens_;
    out.checkpoints = checkpoints_;
    return true;
}

bool PromptCache::load(const Saved & saved) {
    clear();
    if (llama_state_seq_set_data(ctx_, saved.data.data(), saved.data.size(), seq_) != saved.data.size() ||
        !holds_exactly(saved.tokens.size())) {
        clear();
        return false;
    }
    tokens_      = saved.tokens;
    checkpoints_ = saved.checkpoints;
    return true;
}

void PromptCache::keep_prefix(size_t n) {
    tokens_.resize(n);
    while (!checkpoints_.empty() && checkpoints_.back().n_tokens > n) {
        checkpoints_.pop_back();
    }
}

}  // namespace el
