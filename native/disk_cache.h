// disk_cache.h -- the disk tier of the prompt cache: evaluated prefixes kept in files, so
// that a new handle, in this process or another, starts from them instead of evaluating.
//
// Invariant: an entry is used only by a handle whose fingerprint (the model file's identity
// and every setting that changes the state's bytes) equals the writer's, for an owner that
// may read the writer's state (the same owner, or the same named scope: owner.h), and only
// if the whole file checks out (magic, version, sizes, CRC-32 over everything after the
// magic); anything else is skipped as if absent, never loaded half. Files appear whole
// (written to a temporary name, then renamed), so concurrent processes read either the old
// file, the new one or none; the directory is kept under its byte bound by removing the
// least recently used files (a use touches a file's mtime). What el_forget, el_forget_scope
// and el_reset name is removed from disk too (forget()), so no later call of any handle of
// this fingerprint restores it. Directories the tier creates are its owner's alone (0700);
// existing ones keep their mode. A write that fails (a full disk, RLIMIT_FSIZE: SIGXFSZ is
// held back and consumed on the writing thread) leaves no file and costs only speed.
#pragma once

#include "json_args.h"
#include "owner.h"
#include "prompt_cache.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace el {

class DiskCache {
  public:
    // `fingerprint` names what must match for a state's bytes to be valid here; the entries
    // live in a directory of cache_dir named by its digest, and limit_bytes bounds cache_dir.
    DiskCache(std::string cache_dir, size_t limit_bytes, std::string fingerprint);

    // Keep a saved conversation (prompts shorter than kMinTokens are not worth a file). False,
    // leaving nothing behind, on any failure: the disk tier only ever costs speed.
    bool put(const PromptCache::Saved & saved);

    // The entry this owner may read whose tokens share the longest prefix with the prompt,
    // longer than `at_least` tokens; nothing when none is, or none checks out.
    // "Share" counts what prepare() could keep of it (reusable(), for memories of this kind).
    // Only the checkpoint prepare() will restore comes with it (none where the prompt extends
    // the whole entry or the memory is trimmable): the others cost a restore their bytes and
    // serve only prompts that leave this one earlier, which find them in the file again.
    std::optional<PromptCache::Saved> best(const Owner & owner, const std::vector<llama_token> & prompt,
                                           size_t at_least, MemoryKind kind);

    // Remove the entries of one owner, of every owner of its scope (whole_scope), or all of
    // this fingerprint's when owner is null: what forget/reset drop in memory, on disk too.
    // Returns how many files went.
    size_t forget(const Owner * owner, bool whole_scope);

    // {"dir", "limit_bytes", "written", "restored", "rejected", "forgotten"}
    json stats() const;

    static constexpr size_t kMinTokens = 32;
    static constexpr size_t kKeptLast  = 2;  // checkpoints a file keeps after the first

  private:
    struct Section {  // a part of the body: where, how long, its CRC-32
        uint64_t offset = 0, size = 0;
        uint32_t crc    = 0;
    };
    struct Header {
        std::string              path;
        Owner                    owner;
        std::vector<llama_token> tokens;
        std::deque<Checkpoint>   checkpoints;  // their places only: the bytes are in the body
        Section                  state;
        std::vector<Section>     parts;        // one per checkpoint
        uint64_t                 end = 0;      // the file's size, as the header describes it
    };
    std::string group(const Owner & owner) const;  // the file-name prefix of what an owner may read
    std::optional<Header> read_header(const std::string & path) const;
    std::optional<Header> parse_header(const std::string & path, const std::vector<uint8_t> & buf) const;
    // The state and, where `checkpoint` names one, that checkpoint; false unless both check out.
    bool read_body(const Header & h, std::optional<size_t> checkpoint, PromptCache::Saved & out) const;
    void keep_bound() const;
    bool make_dirs() const;                          // root_ and dir_, new ones private
    bool write(const PromptCache::Saved & saved, const std::string & toks, const std::string & tmp) const;

    struct Seen {
        uintmax_t             size = 0;
        std::optional<Header> header;  // none: not one of this fingerprint's entries
    };
    std::map<std::string, Seen> headers_;  // the headers of the files best() last listed, by path

    std::string   root_;  // cache_dir
    std::string   dir_;   // root_/<fingerprint digest>
    size_t        limit_;
    std::string   fingerprint_;
    uint64_t      written_  = 0;
    uint64_t      restored_ = 0;
    mutable uint64_t rejected_ = 0;  // files skipped: foreign, truncated, or failing the CRC
    uint64_t      forgotten_ = 0;  // files removed by forget()
};

}  // namespace el
