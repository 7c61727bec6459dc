// model_identity.h -- what a model file is, by its bytes: the SHA-256 of its content,
// computed once and remembered beside the file, so that the disk tier never serves one model's
// state to another (disk_cache.h).
//
// Invariant: a remembered digest is believed only for the very file it was computed from, as it
// was then: the same device and inode, size, modification time and status-change time (ctime,
// which every write and every utime() moves and no caller can set back), so a file edited in
// place, or another file given the first one's size and mtime, is digested again. Where nothing
// can be remembered (a read-only directory) the digest is computed at each open: slower, never
// wrong. An unreadable file has no identity ("" : the caller keeps no disk tier).
#pragma once

#include <string>

namespace el {

// The file's content digest, 64 hex digits ("" when it cannot be read). The memo is
// `.<name>.el-sha256` beside the file, else `<fallback_dir>/.el-sha256/<digest of the path>`.
std::string model_digest(const std::string & path, const std::string & fallback_dir);

}  // namespace el
