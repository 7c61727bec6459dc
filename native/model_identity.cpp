// model_identity.cpp -- a model file's content digest, remembered; see model_identity.h.

#include "model_identity.h"

#include "json_args.h"

#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <vector>

#ifdef EL_HAVE_SHA256
extern "C" {
#include "sha256.h"  // llama.cpp's vendored public-domain SHA-256 (vendor/hash/sha256)
}
#endif

namespace el {

namespace fs = std::filesystem;

namespace {

// What must not have changed since the memo was written (model_identity.h).
std::string file_state(const std::string & path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        return "";
    }
    return json{{"dev", (uint64_t) st.st_dev},
                {"ino", (uint64_t) st.st_ino},
                {"size", (int64_t) st.st_size},
                {"mtime_ns", (int64_t) st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec},
                {"ctime_ns", (int64_t) st.st_ctim.tv_sec * 1000000000 + st.st_ctim.tv_nsec}}
        .dump();
}

std::string hex(const unsigned char * p, size_t n) {
    static const char digits[] = "0123456789abcdef";
    std::string s;
    for (size_t i = 0; i < n; i++) {
        s += digits[p[i] >> 4];
        s += digits[p[i] & 15];
    }
    return s;
}

std::string digest_content(const std::string & path) {
    std::unique_ptr<FILE, int (*)(FILE *)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
    if (!f) {
        return "";
    }
    std::vector<unsigned char> buf(4 << 20);
#ifdef EL_HAVE_SHA256
    sha256_t h;
    sha256_init(&h);
    for (size_t n; (n = std::fread(buf.data(), 1, buf.size(), f.get())) > 0;) {
        sha256_update(&h, buf.data(), n);
    }
    unsigned char out[SHA256_DIGEST_SIZE];
    sha256_final(&h, out);
    const bool ok = std::ferror(f.get()) == 0;
    return ok ? hex(out, sizeof out) : "";
#else
    // A llama.cpp tree without vendor/hash: four FNV-1a lanes (an identity, not a defence).
    uint64_t lane[4] = {1469598103934665603ull, 1099511628211ull, 7ull, 0x9e3779b97f4a7c15ull};
    size_t   at      = 0;
    for (size_t n; (n = std::fread(buf.data(), 1, buf.size(), f.get())) > 0;) {
        for (size_t i = 0; i < n; i++, at++) {
            uint64_t & l = lane[at & 3];
            l = (l ^ buf[i]) * 1099511628211ull;
        }
    }
    const bool ok = std::ferror(f.get()) == 0;
    return ok ? hex(reinterpret_cast<const unsigned char *>(lane), sizeof lane) : "";
#endif
}

std::string read_all(const fs::path & p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

// Written to a temporary name and renamed: a reader sees a whole memo or none.
bool remember(const fs::path & memo, const std::string & text) {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    const fs::path tmp = memo.string() + ".tmp" + std::to_string(rng());
    {
        std::ofstream out(tmp, std::ios::trunc);
        out << text;
        if (!out.flush()) {
            std::error_code ec;
            fs::remove(tmp, ec);
            return false;
        }
    }
    std::error_code ec;
    fs::rename(tmp, memo, ec);
    if (ec) {
        fs::remove(tmp, ec);
    }
    return !ec;
}

std::string path_digest(const std::string & s) {
    uint64_t h = 1469598103934665603ull;  // names a memo file, checks nothing
    for (unsigned char c : s) {
        h = (h ^ c) * 1099511628211ull;
    }
    char out[17];
    std::snprintf(out, sizeof out, "%016llx", (unsigned long long) h);
    return out;
}

}  // namespace

std::string model_digest(const std::string & path, const std::string & fallback_dir) {
    std::error_code ec;
    const fs::path  abs = fs::absolute(path, ec);
    const fs::path  memos[2] = {
        abs.parent_path() / ("." + abs.filename().string() + ".el-sha256"),
        fs::path(fallback_dir) / ".el-sha256" / path_digest(abs.string()),
    };
    const std::string before = file_state(path);
    if (before.empty()) {
        return "";
    }
    for (const fs::path & memo : memos) {
        const json m = json::parse(read_all(memo), nullptr, false);
        if (m.is_object() && m.value("state", "") == before && m.value("sha256", "").size() == 64) {
            return m["sha256"].get<std::string>();
        }
    }
    const std::string sha = digest_content(path);
    // Only what was read from a file that did not change meanwhile is remembered.
    if (sha.empty() || file_state(path) != before) {
        return sha;
    }
    const std::string text = json{{"state", before}, {"sha256", sha}}.dump();
    // The fallback only inside a cache_dir that exists: creating it is the disk tier's (with
    // its mode, disk_cache.h), not this memo's.
    if (!remember(memos[0], text) && !fallback_dir.empty() && fs::is_directory(fallback_dir, ec)) {
        fs::create_directory(memos[1].parent_path(), ec);
        remember(memos[1], text);
    }
    return sha;
}

}  // namespace el
