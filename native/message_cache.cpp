// message_cache.cpp -- see message_cache.h.

#include "message_cache.h"

#include "json_args.h"

#include <algorithm>
#include <cstring>
#include <iterator>

namespace el {

namespace {

bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

size_t skip_space(std::string_view s, size_t at) {
    while (at < s.size() && is_space(s[at])) {
        at++;
    }
    return at;
}

// Where the object that opens at s[at] ('{') ends (one past its '}'), following strings and
// nested brackets only; npos if the text ends first, or if it nests deeper than any JSON the
// library reads (the whole read then words the error).
size_t object_end(std::string_view s, size_t at) {
    size_t depth = 1;  // the array around it
    for (; at < s.size(); at++) {
        const char c = s[at];
        if (c == '"') {
            at = json_string_end(s, at);
            if (at == std::string_view::npos) {
                return at;
            }
        } else if (c == '{' || c == '[') {
            if (++depth > kMaxJsonDepth) {
                return std::string_view::npos;
            }
        } else if (c == '}' || c == ']') {
            if (--depth == 1) {
                return at + 1;
            }
        }
    }
    return std::string_view::npos;
}

}  // namespace

bool split_json_array(std::string_view text, std::vector<std::string_view> & elements) {
    elements.clear();
    size_t at = skip_space(text, 0);
    if (at >= text.size() || text[at] != '[') {
        return false;
    }
    at = skip_space(text, at + 1);
    for (;;) {
        if (at >= text.size() || text[at] != '{') {
            return false;  // an empty array, or an element that is not an object
        }
        const size_t end = object_end(text, at);
        if (end == std::string_view::npos) {
            return false;
        }
        elements.push_back(text.substr(at, end - at));
        at = skip_space(text, end);
        if (at < text.size() && text[at] == ',') {
            at = skip_space(text, at + 1);
            continue;
        }
        if (at < text.size() && text[at] == ']') {
            return skip_space(text, at + 1) == text.size();
        }
        return false;
    }
}

std::optional<std::vector<common_chat_msg>> MessageCache::read(const std::string & session, std::string_view text,
                                                               const Convert & convert, size_t * n_reused,
                                                               bool by_position, std::vector<uint64_t> * ids) {
    std::vector<std::string_view> elements;
    if (!split_json_array(text, elements)) {
        return std::nullopt;
    }
    reads_++;
    key_ = std::to_string(session.size()) + ':' + session;
    const size_t prefix = key_.size();
    // The session's messages given back by its last call: out[i] stays while its number is the
    // entry's this read takes for element i (the same number is the same message), from the
    // first difference on the rest is dropped and copied from the entries.
    Spare                        spare = by_position ? Spare{} : take_spare(session);
    std::vector<common_chat_msg> out   = std::move(spare.msgs);
    size_t                       kept  = 0;
    out.reserve(elements.size());
    std::vector<Lru::iterator> taken;
    taken.reserve(elements.size());
    // cleared first: a read that throws part way must not leave last_ pointing at entries a
    // later commit may evict (only the by_position hook reads it)
    const std::vector<Lru::iterator> prior = std::move(last_);
    last_.clear();
    if (ids != nullptr) {
        ids->clear();
    }
    for (size_t i = 0; i < elements.size(); i++) {
        if (by_position && i < prior.size()) {
            prior[i]->used = reads_;  // the fault: bytes not compared
            taken.push_back(prior[i]);
        } else {
            key_.resize(prefix);
            key_.append(elements[i]);
            take(elements[i], i, convert, n_reused);
            taken.push_back(lru_.begin());  // take() leaves the element's entry first
        }
        if (kept == i && i < spare.ids.size() && i < out.size() && spare.ids[i] == taken.back()->id) {
            kept++;
        } else {
            out.resize(std::min(out.size(), i));
            out.push_back(taken.back()->msg);
        }
        if (ids != nullptr) {
            ids->push_back(taken.back()->id);
        }
    }
    out.resize(elements.size());  // a conversation shorter than the spare: its leftover goes
    last_ = std::move(taken);
    return out;
}

// The entry for one element's text, converted now unless an earlier read left one; it is
// moved to the front of the recency list.
const MessageCache::Entry & MessageCache::take(std::string_view text, size_t index, const Convert & convert,
                                               size_t * n_reused) {
    auto found = index_.find(key_);
    if (found != index_.end()) {
        lru_.splice(lru_.begin(), lru_, found->second);
        found->second->used = reads_;
        if (n_reused != nullptr) {
            (*n_reused)++;
        }
        return *found->second;
    }
    Entry e;
    e.msg  = convert(text, index);  // may throw: nothing is stored then
    e.key  = key_;
    e.id   = ++ids_;
    e.used = reads_;
    lru_.push_front(std::move(e));
    index_.emplace(std::string_view(lru_.front().key), lru_.begin());
    bytes_ += lru_.front().key.size();
    created_.push_back(lru_.begin());
    return lru_.front();
}

void MessageCache::give_back(const std::string & session, std::vector<common_chat_msg> && msgs,
                             std::vector<uint64_t> && ids) {
    if (msgs.empty() || msgs.size() != ids.size()) {
        return;  // not a read's messages as it returned them
    }
    spares_.push_front(Spare{session, std::move(msgs), std::move(ids)});
    for (auto it = std::next(spares_.begin()); it != spares_.end(); ++it) {
        if (it->session == session) {
            spares_.erase(it);  // a session keeps its latest only
            break;
        }
    }
    if (spares_.size() > kMaxSpares) {
        spares_.pop_back();
    }
}

// The messages `session` gave back last, taken out (none: an empty spare).
MessageCache::Spare MessageCache::take_spare(const std::string & session) {
    for (auto it = spares_.begin(); it != spares_.end(); ++it) {
        if (it->session == session) {
            Spare spare = std::move(*it);
            spares_.erase(it);
            return spare;
        }
    }
    return {};
}

// Drops the least recently used entries beyond the bounds, never one this read took (the
// by_position hook keeps pointing at them until the next read).
void MessageCache::evict() {
    while ((bytes_ > kMaxBytes || lru_.size() > kMaxEntries) && !lru_.empty() && lru_.back().used != reads_) {
        drop(std::prev(lru_.end()));
    }
}

void MessageCache::commit() {
    created_.clear();
    committed_last_ = last_;
    evict();
}

void MessageCache::rollback() {
    for (Lru::iterator it : created_) {
        drop(it);
    }
    created_.clear();
    last_ = committed_last_;  // nothing was evicted since: these entries are all still there
}

void MessageCache::drop(Lru::iterator it) {
    bytes_ -= it->key.size();
    index_.erase(std::string_view(it->key));
    lru_.erase(it);
}

void MessageCache::forget(const char * session) {
    last_.clear();  // the by_position hook's view of the last read may point into what goes
    committed_last_.clear();
    created_.clear();  // forget runs between calls: nothing is pending
    spares_.remove_if([session](const Spare & s) { return session == nullptr || s.session == session; });
    // the length before the ':' holds only digits, so this prefix starts no other session's key
    const std::string prefix = session == nullptr ? "" : std::to_string(std::strlen(session)) + ':' + session;
    for (auto it = lru_.begin(); it != lru_.end();) {
        const auto next = std::next(it);
        if (it->key.compare(0, prefix.size(), prefix) == 0) {
            drop(it);
        }
        it = next;
    }
}

}  // namespace el
