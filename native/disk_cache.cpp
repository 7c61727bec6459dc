// disk_cache.cpp -- prefixes in files; see disk_cache.h.
//
// File layout (host byte order; a file from another byte order fails the magic's version):
//   "ELPC" u32 version | u32 len, fingerprint | u8 scoped, u32 len, scope, u32 len, session |
//   u64 n, int32 tokens[n] | u32 m, u64 checkpoint places[m] |
//   u64 len, u32 CRC of the state | { u64 len, u32 CRC } per checkpoint |
//   u32 CRC of the header (every byte after the first 8 up to here) |
//   state bytes | checkpoint bytes, in order.
// Each CRC is CRC-32C (Castagnoli's, as iSCSI's and ext4's). The header is read to choose an
// entry; a restore then reads and checks only the state and the one checkpoint prepare() will
// start from, not the whole file: on Gemma 3 that is ~18 of a ~34 MB file, and reading and
// checking the rest was most of a restored first token's time.

#include "disk_cache.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#if defined(__x86_64__)
#include <nmmintrin.h>
#endif
#include <map>
#include <fstream>
#include <random>
#include <system_error>

#include <cerrno>
#include <csignal>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>

namespace el {

namespace fs = std::filesystem;

namespace {

constexpr char     kMagic[4] = {'E', 'L', 'P', 'C'};
constexpr uint32_t kVersion  = 4;
constexpr uint64_t kMaxField = uint64_t(1) << 40;  // no field of a sane file is this long

// CRC-32C (Castagnoli): x86's SSE4.2 computes it eight bytes an instruction, four times the
// table-driven IEEE CRC the tier used before (2 against 8 ms for the 18 MB a Gemma 3 restore
// checks; a larger model's state is hundreds of MB). Elsewhere, the same CRC eight bytes a step
// from tables ("slicing by 8"). Either way the same value, so files move between hosts.
uint32_t crc32c_tables(uint32_t crc, const uint8_t * p, size_t n) {
    static const auto tables = [] {
        std::array<std::array<uint32_t, 256>, 8> t{};
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) {
                c = (c & 1) ? 0x82F63B78u ^ (c >> 1) : c >> 1;
            }
            t[0][i] = c;
        }
        for (uint32_t i = 0; i < 256; i++) {
            for (size_t k = 1; k < 8; k++) {
                t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFF];
            }
        }
        return t;
    }();
    for (; n >= 8; n -= 8, p += 8) {
        uint32_t lo, hi;
        std::memcpy(&lo, p, 4);
        std::memcpy(&hi, p + 4, 4);
        lo ^= crc;  // little-endian hosts (a big-endian one fails every file's check: never wrong)
        crc = tables[7][lo & 0xFF] ^ tables[6][(lo >> 8) & 0xFF] ^ tables[5][(lo >> 16) & 0xFF] ^ tables[4][lo >> 24] ^
              tables[3][hi & 0xFF] ^ tables[2][(hi >> 8) & 0xFF] ^ tables[1][(hi >> 16) & 0xFF] ^ tables[0][hi >> 24];
    }
    for (; n > 0; n--, p++) {
        crc = tables[0][(crc ^ *p) & 0xFF] ^ (crc >> 8);
    }
    return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(uint32_t crc, const uint8_t * p, size_t n) {
    uint64_t c = crc;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t v;
        std::memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
    }
    for (; n > 0; n--, p++) {
        c = _mm_crc32_u8((uint32_t) c, *p);
    }
    return (uint32_t) c;
}
#endif

uint32_t crc32c(uint32_t crc, const void * data, size_t n) {
    const auto * p = static_cast<const uint8_t *>(data);
#if defined(__x86_64__)
    static const bool sse42 = [] {
        __builtin_cpu_init();  // this may run before the library's constructors have
        return __builtin_cpu_supports("sse4.2") != 0;
    }();
    if (sse42) {
        return ~crc32c_sse42(~crc, p, n);
    }
#endif
    return ~crc32c_tables(~crc, p, n);
}

std::string digest(const std::string & s) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a: names files, checks nothing
    for (unsigned char c : s) {
        h = (h ^ c) * 1099511628211ull;
    }
    char out[17];
    std::snprintf(out, sizeof out, "%016llx", (unsigned long long) h);
    return out;
}

// Writes fields and keeps the CRC of what follows the first 8 bytes.
struct Writer {
    std::ofstream out;
    uint32_t      crc = 0;
    void raw(const void * p, size_t n, bool counted = true) {
        out.write(static_cast<const char *>(p), (std::streamsize) n);
        if (counted) {
            crc = crc32c(crc, p, n);
        }
    }
    template <typename T> void num(T v) { raw(&v, sizeof v); }
    void str(const std::string & s) {
        num<uint32_t>((uint32_t) s.size());
        raw(s.data(), s.size());
    }
};

// Reads fields from a buffer, refusing any that runs past its end.
struct Reader {
    const uint8_t * p;
    size_t          left;
    bool            ok = true;
    bool take(void * dst, size_t n) {
        if (!ok || n > left) {
            return ok = false;
        }
        std::memcpy(dst, p, n);
        p += n, left -= n;
        return true;
    }
    template <typename T> T num() {
        T v{};
        take(&v, sizeof v);
        return v;
    }
    std::string str() {
        const uint32_t n = num<uint32_t>();
        if (!ok || n > left) {
            ok = false;
            return {};
        }
        std::string s(n, '\0');
        take(s.data(), n);
        return s;
    }
};

std::vector<uint8_t> read_file(const std::string & path, size_t limit) {
    std::ifstream in(path, std::ios::binary);
    std::vector<uint8_t> buf;
    if (!in) {
        return buf;
    }
    in.seekg(0, std::ios::end);
    const auto size = (size_t) std::max<std::streamoff>(0, in.tellg());
    in.seekg(0);
    buf.resize(std::min(size, limit));
    in.read(reinterpret_cast<char *>(buf.data()), (std::streamsize) buf.size());
    buf.resize((size_t) std::max<std::streamsize>(0, in.gcount()));
    return buf;
}

}  // namespace

DiskCache::DiskCache(std::string cache_dir, size_t limit_bytes, std::string fingerprint)
    : root_(std::move(cache_dir)), limit_(limit_bytes), fingerprint_(std::move(fingerprint)) {
    dir_ = (fs::path(root_) / digest(fingerprint_)).string();
}

std::string DiskCache::group(const Owner & owner) const {
    return digest(owner.scoped ? "s" + owner.scope : owner.key());
}

// A file keeps the first kKeptFirst checkpoints (where the fixed part of a conversation and its
// first prompt end: what the next process or another conversation starts from) and the last
// kKeptLast ones; the others
// would make every restore read more (on Gemma 3, 8 checkpoints are ~60 MB of a 70 MB file).
bool DiskCache::put(const PromptCache::Saved & whole) {
    if (whole.tokens.size() < kMinTokens || whole.data.empty() || limit_ == 0) {
        return false;
    }
    PromptCache::Saved thin;
    constexpr size_t first = PromptCache::kKeptFirst;
    const PromptCache::Saved & saved = whole.checkpoints.size() <= first + kKeptLast ? whole : thin;
    if (&saved == &thin) {
        thin.tokens = whole.tokens, thin.data = whole.data, thin.owner = whole.owner;
        thin.checkpoints.insert(thin.checkpoints.end(), whole.checkpoints.begin(), whole.checkpoints.begin() + first);
        thin.checkpoints.insert(thin.checkpoints.end(), whole.checkpoints.end() - kKeptLast, whole.checkpoints.end());
    }
    std::string toks(reinterpret_cast<const char *>(saved.tokens.data()), saved.tokens.size() * sizeof(llama_token));
    const std::string name = group(saved.owner) + "-" + digest(saved.owner.key() + '\0' + toks) + ".elpc";
    std::error_code ec;
    if (!make_dirs()) {
        return false;
    }
    const fs::path final_path = fs::path(dir_) / name;
    if (fs::exists(final_path, ec)) {
        fs::last_write_time(final_path, fs::file_time_type::clock::now(), ec);  // the same prefix: a use
        return true;
    }
    thread_local std::mt19937_64 rng{std::random_device{}()};
    const fs::path tmp = fs::path(dir_) / (name + ".tmp" + std::to_string(rng()));
    if (!write(saved, toks, tmp.string())) {
        fs::remove(tmp, ec);
        return false;
    }
    fs::rename(tmp, final_path, ec);  // atomic: readers see the whole file or none
    if (ec) {
        fs::remove(tmp, ec);
        return false;
    }
    written_++;
    keep_bound();
    return true;
}

// The files hold conversations' state: a directory the tier creates is the owner's alone (the
// files inside inherit nothing, so they are kept unreadable through it). One that exists keeps
// its mode: a shared or sticky directory the caller chose is the caller's policy, not ours.
bool DiskCache::make_dirs() const {
    std::error_code ec;
    for (const fs::path & d : {fs::path(root_), fs::path(dir_)}) {
        if (fs::is_directory(d, ec)) {
            continue;
        }
        if (!d.parent_path().empty() && !fs::is_directory(d.parent_path(), ec)) {
            fs::create_directories(d.parent_path(), ec);  // above cache_dir: the caller's, default mode
        }
        if (::mkdir(d.c_str(), 0700) != 0 && errno != EEXIST) {
            return false;
        }
    }
    return true;
}

namespace {

// Over RLIMIT_FSIZE a write raises SIGXFSZ, whose default action ends the process. While the
// file is written the signal is blocked on this thread (it is sent to the thread that wrote),
// the write then fails with EFBIG, and a signal left pending is consumed before the mask is
// put back: the caller's own disposition is never changed.
struct HoldFileSizeSignal {
    sigset_t only{}, before{};
    HoldFileSizeSignal() {
        sigemptyset(&only);
        sigaddset(&only, SIGXFSZ);
        pthread_sigmask(SIG_BLOCK, &only, &before);
    }
    ~HoldFileSizeSignal() {
        const timespec now{0, 0};
        while (sigtimedwait(&only, nullptr, &now) == SIGXFSZ) {
        }
        pthread_sigmask(SIG_SETMASK, &before, nullptr);
    }
};

}  // namespace

// The whole file under `tmp`; false if any byte could not be written.
bool DiskCache::write(const PromptCache::Saved & saved, const std::string & toks, const std::string & tmp) const {
    HoldFileSizeSignal hold;
    Writer w{std::ofstream(tmp, std::ios::binary | std::ios::trunc)};
    w.raw(kMagic, 4, false);
    w.raw(&kVersion, sizeof kVersion, false);
    w.str(fingerprint_);
    w.num<uint8_t>(saved.owner.scoped);
    w.str(saved.owner.scope);
    w.str(saved.owner.session);
    w.num<uint64_t>(saved.tokens.size());
    w.raw(toks.data(), toks.size());
    w.num<uint32_t>((uint32_t) saved.checkpoints.size());
    for (const Checkpoint & cp : saved.checkpoints) {
        w.num<uint64_t>(cp.n_tokens);
    }
    w.num<uint64_t>(saved.data.size());
    w.num<uint32_t>(crc32c(0, saved.data.data(), saved.data.size()));
    for (const Checkpoint & cp : saved.checkpoints) {
        w.num<uint64_t>(cp.data.size());
        w.num<uint32_t>(crc32c(0, cp.data.data(), cp.data.size()));
    }
    const uint32_t crc = w.crc;
    w.raw(&crc, sizeof crc, false);
    w.raw(saved.data.data(), saved.data.size(), false);
    for (const Checkpoint & cp : saved.checkpoints) {
        w.raw(cp.data.data(), cp.data.size(), false);
    }
    w.out.flush();
    const bool ok = bool(w.out);
    w.out.close();
    return ok && !w.out.fail();
}

// An owner's files are those its group names; a session's own are told apart from its scope's
// other sessions by the header.
size_t DiskCache::forget(const Owner * owner, bool whole_scope) {
    const std::string prefix = owner != nullptr ? group(*owner) + "-" : "";
    std::error_code ec;
    std::vector<fs::path> gone;
    for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.compare(0, prefix.size(), prefix) != 0 || name.find(".elpc") == std::string::npos) {
            continue;
        }
        if (owner != nullptr && !whole_scope && it->path().extension() == ".elpc") {
            const std::optional<Header> h = read_header(it->path().string());
            if (h && h->owner != *owner) {
                continue;  // another session of the same scope
            }
        }
        gone.push_back(it->path());  // a file not readable as ours is forgotten with its group
    }
    size_t n = 0;
    for (const fs::path & p : gone) {
        n += fs::remove(p, ec) ? 1 : 0;
        headers_.erase(p.string());
    }
    forgotten_ += n;
    return n;
}

// The fields before the state, read from the file's start; nothing for a file that is not
// one of this fingerprint's entries.
std::optional<DiskCache::Header> DiskCache::read_header(const std::string & path) const {
    // Most headers fit in 64 KiB (~16k tokens); a longer one is read again whole, up to the
    // header of a ~4M-token prompt. A new handle reads every candidate file's header once.
    constexpr size_t kPeek = 64 << 10, kMaxHeader = 16 << 20;
    const std::vector<uint8_t> buf = read_file(path, kPeek);
    if (buf.size() == kPeek) {
        std::optional<Header> h = parse_header(path, buf);
        return h ? h : parse_header(path, read_file(path, kMaxHeader));
    }
    return parse_header(path, buf);
}

// The header's fields from the file's first bytes; nothing unless they are all there and check out.
std::optional<DiskCache::Header> DiskCache::parse_header(const std::string & path, const std::vector<uint8_t> & buf) const {
    Reader r{buf.data(), buf.size()};
    char magic[4];
    r.take(magic, 4);
    const uint32_t version = r.num<uint32_t>();
    Header h;
    h.path = path;
    const bool ours = r.ok && std::memcmp(magic, kMagic, 4) == 0 && version == kVersion && r.str() == fingerprint_;
    if (!ours || !r.ok) {
        return std::nullopt;
    }
    h.owner.scoped  = r.num<uint8_t>() != 0;
    h.owner.scope   = r.str();
    h.owner.session = r.str();
    const uint64_t n = r.num<uint64_t>();
    if (!r.ok || n > r.left / sizeof(llama_token)) {
        return std::nullopt;
    }
    h.tokens.resize(n);
    r.take(h.tokens.data(), n * sizeof(llama_token));
    const uint32_t m = r.num<uint32_t>();
    for (uint32_t i = 0; r.ok && i < m; i++) {
        const uint64_t at = r.num<uint64_t>();
        if (at > n) {
            return std::nullopt;
        }
        h.checkpoints.push_back(Checkpoint{(size_t) at, {}});
    }
    auto section = [&r]() { return Section{0, r.num<uint64_t>(), r.num<uint32_t>()}; };
    h.state = section();
    for (uint32_t i = 0; r.ok && i < m; i++) {
        h.parts.push_back(section());
    }
    const size_t   header_end = buf.size() - r.left;
    const uint32_t crc        = r.num<uint32_t>();
    if (!r.ok || crc32c(0, buf.data() + 8, header_end - 8) != crc) {
        return std::nullopt;
    }
    // the body's sections follow the header in order; each is bounded, so their sum cannot wrap
    uint64_t at = header_end + sizeof crc;
    h.state.offset = at;
    at += h.state.size;
    for (Section & part : h.parts) {
        part.offset = at;
        at += part.size;
    }
    if (h.state.size > kMaxField ||
        std::any_of(h.parts.begin(), h.parts.end(), [](const Section & x) { return x.size > kMaxField; })) {
        return std::nullopt;
    }
    h.end = at;
    return h;
}

// The state and the chosen checkpoint, each checked by its own CRC before any of it is believed.
bool DiskCache::read_body(const Header & h, std::optional<size_t> checkpoint, PromptCache::Saved & out) const {
    std::ifstream in(h.path, std::ios::binary);
    auto read = [&in](const Section & s, std::vector<uint8_t> & dst) {
        dst.resize(s.size);
        in.seekg((std::streamoff) s.offset);
        in.read(reinterpret_cast<char *>(dst.data()), (std::streamsize) s.size);
        return in && (uint64_t) in.gcount() == s.size && crc32c(0, dst.data(), dst.size()) == s.crc;
    };
    if (!in || !read(h.state, out.data)) {
        return false;
    }
    if (checkpoint) {
        Checkpoint cp{h.checkpoints[*checkpoint].n_tokens, {}};
        if (!read(h.parts[*checkpoint], cp.data)) {
            return false;
        }
        out.checkpoints.push_back(std::move(cp));
    }
    out.tokens = h.tokens;
    out.owner  = h.owner;
    return true;
}

std::optional<PromptCache::Saved> DiskCache::best(const Owner & owner, const std::vector<llama_token> & prompt,
                                                  size_t at_least, MemoryKind kind) {
    // No entry can keep more than all but the prompt's last token: a call that continues the
    // conversation its slot holds (most calls) lists nothing.
    if (limit_ == 0 || at_least + 1 >= prompt.size()) {
        return std::nullopt;
    }
    const std::string prefix = group(owner) + "-";
    std::vector<std::pair<size_t, Header>> found;
    std::map<std::string, Seen> seen;  // this listing's files: what is gone leaves the memo
    std::error_code ec;
    for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.compare(0, prefix.size(), prefix) != 0 || it->path().extension() != ".elpc") {
            continue;
        }
        // A file's header is read once per size: a name is its content's digest, and the body,
        // read again on use, is what the CRC checks.
        const std::string path = it->path().string();
        const uintmax_t   size = it->file_size(ec);
        auto              memo = headers_.find(path);
        const bool        read = memo == headers_.end() || memo->second.size != size;
        Seen &            s    = seen[path];
        s = read ? Seen{size, read_header(path)} : std::move(memo->second);
        const std::optional<Header> & h = s.header;
        if (!h || h->end != size) {
            rejected_ += read;  // a foreign or truncated file counts once
            continue;
        }
        if (!(h->owner == owner || h->owner.shares_with(owner))) {
            continue;
        }
        const size_t n = reusable(kind, h->tokens, h->checkpoints, prompt);
        if (n > at_least) {
            found.emplace_back(n, *h);
        }
    }
    headers_ = std::move(seen);
    // longest first; an entry that fails its check gives way to the next
    std::sort(found.begin(), found.end(), [](const auto & a, const auto & b) { return a.first > b.first; });
    for (const auto & [n, h] : found) {
        // the checkpoint prepare() will restore: the one reusable() counted, unless the prompt
        // extends the whole entry (or the memory needs none)
        std::optional<size_t> checkpoint;
        for (size_t i = 0; n < h.tokens.size() && i < h.checkpoints.size(); i++) {
            checkpoint = h.checkpoints[i].n_tokens == n ? std::optional<size_t>(i) : checkpoint;
        }
        PromptCache::Saved saved;
        if (read_body(h, checkpoint, saved)) {
            fs::last_write_time(h.path, fs::file_time_type::clock::now(), ec);
            restored_++;
            return saved;
        }
        rejected_++;
    }
    return std::nullopt;
}

// Oldest first, until the files of every fingerprint under cache_dir fit the bound. Another
// process may remove the same files meanwhile: a file already gone is not an error.
void DiskCache::keep_bound() const {
    std::vector<std::pair<fs::file_time_type, fs::path>> files;
    uintmax_t total = 0;
    std::error_code ec;
    for (fs::recursive_directory_iterator it(root_, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.find(".elpc.tmp") != std::string::npos &&
            it->last_write_time(ec) < fs::file_time_type::clock::now() - std::chrono::minutes(10)) {
            fs::remove(it->path(), ec);  // left by a writer that died before its rename
            continue;
        }
        if (it->is_regular_file(ec) && it->path().extension() == ".elpc") {
            const uintmax_t size = it->file_size(ec);
            total += ec ? 0 : size;
            files.emplace_back(it->last_write_time(ec), it->path());
        }
    }
    std::sort(files.begin(), files.end());
    for (const auto & [when, path] : files) {
        if (total <= limit_) {
            break;
        }
        const uintmax_t size = fs::file_size(path, ec);
        if (fs::remove(path, ec)) {
            total -= std::min<uintmax_t>(total, size);
        }
    }
}

json DiskCache::stats() const {
    return json{{"dir", dir_}, {"limit_bytes", limit_}, {"written", written_}, {"restored", restored_},
                {"rejected", rejected_}, {"forgotten", forgotten_}};
}

}  // namespace el
