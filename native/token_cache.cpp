// token_cache.cpp -- incremental prompt tokenization; see token_cache.h for the invariant.

#include "token_cache.h"

#include "common.h"
#include "timing.h"

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <cstring>

namespace el {

namespace {

// What llama.cpp's tokenizer cuts the text at before it tokenizes (llama-vocab.cpp,
// cache_special_tokens): with parse_special, every one of these is matched in the text.
constexpr int kSpecial = LLAMA_TOKEN_ATTR_CONTROL | LLAMA_TOKEN_ATTR_USER_DEFINED | LLAMA_TOKEN_ATTR_UNKNOWN;

// How many leading bytes of a[0..n) and b[0..n) are equal: memcmp over blocks, then byte by
// byte (std::mismatch compares one byte at a time, ~25 us per ~16k-token prompt and entry).
size_t same_bytes(const char * a, const char * b, size_t n) {
    constexpr size_t kBlock = 256;
    size_t           i      = 0;
    while (i + kBlock <= n && std::memcmp(a + i, b + i, kBlock) == 0) {
        i += kBlock;
    }
    while (i < n && a[i] == b[i]) {
        i++;
    }
    return i;
}

// The whitespace a special token may strip next to it (llama-vocab.cpp: isspace).
bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

std::string strip_space(const std::string & s) {
    std::string out;
    std::copy_if(s.begin(), s.end(), std::back_inserter(out), [](char c) { return !is_space(c); });
    return out;
}

// Appends code point cp to s as UTF-8.
void append_utf8(std::string & s, uint32_t cp) {
    if (cp < 0x80) {
        s += (char) cp;
    } else if (cp < 0x800) {
        s += (char) (0xC0 | (cp >> 6));
        s += (char) (0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        s += (char) (0xE0 | (cp >> 12));
        s += (char) (0x80 | ((cp >> 6) & 0x3F));
        s += (char) (0x80 | (cp & 0x3F));
    } else {
        s += (char) (0xF0 | (cp >> 18));
        s += (char) (0x80 | ((cp >> 12) & 0x3F));
        s += (char) (0x80 | ((cp >> 6) & 0x3F));
        s += (char) (0x80 | (cp & 0x3F));
    }
}

// Whether text, tokenized and spelled back, comes back (whitespace aside: a tokenizer may
// add or merge it, and min_tokens does not count it).
bool spelled_back(const llama_vocab * vocab, const std::string & text) {
    std::string back;
    for (llama_token t : common_tokenize(vocab, text, false, false)) {
        back += common_token_to_piece(vocab, t, false);
    }
    return strip_space(back) == strip_space(text);
}

// Which bytes of a text some token is sure to spell, as min_tokens' bound needs: a byte a
// tokenizer drops (no token for it) must not be counted, or the bound refuses prompts that
// fit. Probed with valid UTF-8 only, since a prompt is (JSON strings are): each ASCII byte
// alone, then all of them at once; code points of every encoded length, spread over their
// ranges, decide the bytes 0x80-0xFF together. smollm2's gpt2-style vocabulary drops the
// control bytes 0x04 and 0x06, and raw bytes 0x80-0xFF alone are not text (a byte-level BPE
// spells them as U+FFFD): probing all 255 bytes in one string as whole-or-nothing disabled the
// bound on smollm2 and qwen2.5, so a refused 3 MB request tokenized for 0.7 s.
std::array<bool, 256> spelled_bytes(const llama_vocab * vocab) {
    std::array<bool, 256> spelled{};
    std::string           ascii;
    for (int c = 1; c < 0x80; c++) {
        spelled[c] = !is_space((char) c) && spelled_back(vocab, std::string(1, (char) c));
        if (spelled[c]) {
            ascii += (char) c;
        }
    }
    if (!spelled_back(vocab, ascii)) {
        return {};
    }
    std::string wide;
    for (uint32_t c = 0x80; c < 0x800; c += 13) {
        append_utf8(wide, c);
    }
    for (uint32_t c = 0x800; c < 0x10000; c += 397) {
        if (c < 0xD800 || c > 0xDFFF) {  // surrogates are not code points of text
            append_utf8(wide, c);
        }
    }
    for (uint32_t c = 0x10000; c < 0x110000; c += 0x3FFF) {
        append_utf8(wide, c);
    }
    if (spelled_back(vocab, wide)) {
        std::fill(spelled.begin() + 0x80, spelled.end(), true);
    }
    return spelled;
}

}  // namespace

std::vector<llama_token> tokenize_prompt(const llama_vocab * vocab, const std::string & text) {
    std::vector<llama_token> toks = common_tokenize(vocab, text, /*add_special=*/true, /*parse_special=*/true);
    const llama_token bos = llama_vocab_bos(vocab);
    if (toks.size() >= 2 && toks[0] == bos && toks[1] == bos) {
        toks.erase(toks.begin());  // the template wrote a BOS and the tokenizer added one
    }
    return toks;
}

TokenCache::TokenCache(const llama_vocab * vocab) : vocab_(vocab) {
    const enum llama_vocab_type type    = llama_vocab_type(vocab);
    const bool                  bounded = type == LLAMA_VOCAB_TYPE_BPE || type == LLAMA_VOCAB_TYPE_SPM;
    const int32_t               n       = llama_vocab_n_tokens(vocab);
    char                        buf[512];
    for (llama_token id = 0; id < n; id++) {  // one pass over the vocabulary for both bounds
        if (llama_vocab_get_attr(vocab, id) & kSpecial) {
            max_special_len_ = std::max(max_special_len_, std::string(llama_vocab_get_text(vocab, id)).size());
        }
        if (bounded) {
            const int32_t len = llama_token_to_piece(vocab, id, buf, sizeof(buf), 0, /*special=*/true);
            max_piece_len_    = std::max(max_piece_len_, (size_t) std::abs(len));
        }
    }
    if (bounded) {
        spelled_ = spelled_bytes(vocab);
    }
    // An EOS appended by the tokenizer would sit in the middle of a reused prefix.
    enabled_ = !llama_vocab_get_add_eos(vocab);
}

size_t TokenCache::min_tokens(const std::string & text) const {
    if (max_piece_len_ == 0) {
        return 0;
    }
    const size_t spelled =
        (size_t) std::count_if(text.begin(), text.end(), [this](char c) { return spelled_[(unsigned char) c]; });
    return (spelled + max_piece_len_ - 1) / max_piece_len_;
}

void TokenCache::find_cuts(Entry & e, size_t from_byte, size_t from_token) const {
    const llama_token bos = llama_vocab_bos(vocab_);
    size_t            off = from_byte;
    for (size_t i = from_token; i < e.tokens.size(); i++) {
        const llama_token t     = e.tokens[i];
        const std::string piece = common_token_to_piece(vocab_, t, /*special=*/true);
        if (i == 0 && t == bos && e.text.compare(0, piece.size(), piece) != 0) {
            continue;  // a BOS the tokenizer added: it spells nothing in the text
        }
        if (piece.empty() || e.text.compare(off, piece.size(), piece) != 0) {
            return;  // the tokens no longer spell the text byte for byte: no cuts from here
        }
        off += piece.size();
        const int attr = llama_vocab_get_attr(vocab_, t);
        if ((attr & kSpecial) && !(attr & LLAMA_TOKEN_ATTR_RSTRIP)) {
            e.cuts.emplace_back(off, i + 1);
        }
    }
}

std::vector<llama_token> TokenCache::tokenize(const std::string & session, const std::string & text, Stats * stats,
                                              bool ignore_edits) {
    const auto    t0   = steady::now();
    const Entry * best = nullptr;
    size_t        same = 0;  // bytes `text` shares with the best entry
    for (const std::deque<Entry> * list : {&pending_, &recent_}) {
        for (auto it = list->begin(); it != list->end() && enabled_ && !(ignore_edits && best); ++it) {
            if (it->session != session) {
                continue;
            }
            const size_t n = std::min(it->text.size(), text.size());
            if (ignore_edits) {  // the fault the differential test must catch: the last prompt, unchecked
                best = &*it;
                same = n;
                break;
            }
            const size_t d = same_bytes(text.data(), it->text.data(), n);
            if (best == nullptr || d > same) {
                best = &*it;
                same = d;
            }
        }
    }
    Entry  e{session, text, {}, {}};
    size_t reused = 0;
    if (best != nullptr && same == text.size() && same == best->text.size() && !ignore_edits) {
        e.tokens = best->tokens;  // the very same prompt
        e.cuts   = best->cuts;
        reused   = e.tokens.size();
    } else {
        // The last cut that every tokenizer decision before it reads from the shared bytes.
        const size_t limit = same >= max_special_len_ ? same - max_special_len_ : 0;
        size_t       k     = 0;
        if (best != nullptr) {
            auto past = std::upper_bound(best->cuts.begin(), best->cuts.end(), std::make_pair(limit, SIZE_MAX));
            k         = (size_t) (past - best->cuts.begin());
        }
        if (k > 0) {
            const auto [cut_byte, cut_tokens] = best->cuts[k - 1];
            e.tokens.assign(best->tokens.begin(), best->tokens.begin() + (ptrdiff_t) cut_tokens);
            const auto rest = common_tokenize(vocab_, text.substr(cut_byte), /*add_special=*/false, /*parse_special=*/true);
            e.tokens.insert(e.tokens.end(), rest.begin(), rest.end());
            e.cuts.assign(best->cuts.begin(), best->cuts.begin() + (ptrdiff_t) k);
            find_cuts(e, cut_byte, cut_tokens);
            reused = cut_tokens;
        } else {
            e.tokens = tokenize_prompt(vocab_, text);
            find_cuts(e, 0, 0);
        }
    }
    std::vector<llama_token> out = e.tokens;
    pending_.push_front(std::move(e));
    if (stats != nullptr) {
        stats->n_reused += reused;
        stats->ms_tokenize += ms_since(t0);
    }
    return out;
}

void TokenCache::commit() {
    while (!pending_.empty()) {
        Entry e = std::move(pending_.back());  // oldest first, so the newest ends up in front
        pending_.pop_back();
        for (auto it = recent_.begin(); it != recent_.end();) {
            // a kept prompt that this one extends: keep the longer one only
            const bool extended = it->session == e.session && it->text.size() <= e.text.size() &&
                                  e.text.compare(0, it->text.size(), it->text) == 0;
            it = extended ? recent_.erase(it) : std::next(it);
        }
        recent_.push_front(std::move(e));
        if (recent_.size() > kKeep) {
            recent_.pop_back();
        }
    }
}

size_t TokenCache::tokens_before(const std::string & session, const std::string & text, size_t byte) const {
    const std::deque<Entry> & list = pending_.empty() ? recent_ : pending_;
    if (list.empty() || list.front().session != session || list.front().text != text) {
        return SIZE_MAX;
    }
    const Entry & e    = list.front();
    const auto    past = std::upper_bound(e.cuts.begin(), e.cuts.end(), std::make_pair(byte, SIZE_MAX));
    if (past == e.cuts.begin()) {
        return SIZE_MAX;
    }
    auto [off, i] = *(past - 1);
    for (size_t walked = 0; off < byte; walked++) {
        if (i >= e.tokens.size() || walked == kMaxWalk) {
            return SIZE_MAX;
        }
        const std::string piece = common_token_to_piece(vocab_, e.tokens[i], /*special=*/true);
        if (piece.empty() || text.compare(off, piece.size(), piece) != 0) {
            return SIZE_MAX;
        }
        if (off + piece.size() > byte) {
            return i;  // this token crosses `byte`
        }
        off += piece.size();
        i++;
    }
    return i;
}

void TokenCache::forget(const char * session) {
    pending_.clear();
    for (auto it = recent_.begin(); it != recent_.end();) {
        it = session == nullptr || it->session == session ? recent_.erase(it) : std::next(it);
    }
}

}  // namespace el
