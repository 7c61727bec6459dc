// messages.h -- the caller's messages as llama.cpp's common/ reads them: parsed, each
// checked (roles, content, tool calls), normalised where OpenAI allows what common/ does
// not, and converted to common_chat_msg.
//
// Invariant: read_messages returns exactly what read_messages_whole returns for the same
// text, and throws the same error (a UserError naming the first bad message); it only
// converts fewer messages, taking the rest from the handle's cache (message_cache.h).
#pragma once

#include "chat.h"
#include "message_cache.h"

#include <cstddef>
#include <string>
#include <vector>

namespace el {

// The whole array read: parsed, every message checked in order, converted.
std::vector<common_chat_msg> read_messages_whole(const char * text);

// The same messages, each element converted only when `session` has not sent the same bytes
// to this cache before; `n_reused` counts those taken, and `ids` gets each message's number in
// the cache (MessageCache::read), or nothing where the whole read read them. Where the
// element-wise read refuses the array, the whole read reads it and words any error.
// `by_position` is the cache's test fault (MessageCache::read).
std::vector<common_chat_msg> read_messages(MessageCache & cache, const std::string & session, const char * text,
                                           size_t & n_reused, std::vector<uint64_t> & ids, bool by_position);

// The index of the first message where `a` and `b` differ (one ending first counts), or
// SIZE_MAX where they are equal.
size_t first_difference(const std::vector<common_chat_msg> & a, const std::vector<common_chat_msg> & b);

}  // namespace el
