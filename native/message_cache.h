// message_cache.h -- the caller's messages read at the cost of what is new in them.
//
// Every call sends the whole conversation as one JSON array, and reading it (parse, check,
// convert to llama.cpp's common_chat_msg) cost O(conversation): about 1 ms at ~16k tokens on
// 2 cores, twice the JSON parse and allocation-heavy conversions. An agent's next call repeats
// every earlier message byte for byte. A message's check and conversion read nothing but its
// own text (its index only names it in an error), so the cache keeps, per handle, the converted
// form of recently read message texts, keyed by the session and their exact bytes: a call
// never gains from another session's messages (n_messages_reused says what it took, and the
// header promises that nothing a call reports depends on another session's prompts).
//
// Invariant: read() returns exactly the messages that parsing the whole array and converting
// each element returns, or nothing (std::nullopt) and the caller reads the array whole. The
// array is split into its elements by a scanner that only finds where each element ends; an
// element is either converted from its text or taken from an entry whose text is the same
// bytes. Anything the scanner does not take as a non-empty array of objects is left to the
// whole read, which also words every error.
#pragma once

#include "chat.h"

#include <cstddef>
#include <functional>
#include <list>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace el {

// The elements of the JSON array `text`, as byte ranges of it; false where `text` is not an
// array of one or more objects separated the way JSON allows (each element's own syntax is
// left to its parser: only strings and brackets are followed to find where it ends).
bool split_json_array(std::string_view text, std::vector<std::string_view> & elements);

class MessageCache {
  public:
    // One element's text (and its index, for errors) to the message common/ reads; throws if
    // the element is not a valid message.
    using Convert = std::function<common_chat_msg(std::string_view text, size_t index)>;

    // The messages of the JSON array `text`. Throws what `convert` throws. `ids`, when given,
    // receives each message's number: the same number only for the same entry, never reused by
    // this cache, so two messages with one number are equal (the chat template's values are kept
    // by it: common_chat_templates_inputs::message_ids). `by_position` is a test hook, the fault
    // the differential test must catch: element i is taken as the previous call's element i
    // (message and number) whatever its bytes, as a cache keyed by position would.
    std::optional<std::vector<common_chat_msg>> read(const std::string & session, std::string_view text,
                                                     const Convert & convert, size_t * n_reused = nullptr,
                                                     bool by_position = false, std::vector<uint64_t> * ids = nullptr);

    // Takes back the messages a read for `session` returned, with their numbers, once the call is
    // done with them and has not altered them. The session's next read keeps each leading message
    // whose number is unchanged instead of copying it out of its entry again, and frees only the
    // messages after the first change: a call costs no copy of the conversation it repeats
    // (~0.15 ms at ~4k tokens). Kept for the few sessions that gave back last.
    void give_back(const std::string & session, std::vector<common_chat_msg> && msgs, std::vector<uint64_t> && ids);

    // The entries reads made since the last commit() or rollback() are pending: later reads
    // take them, but only commit() lets them push older entries out of the bounds, and
    // rollback() drops them (and puts back the by_position hook's view of the last read), so a
    // request that is refused after its messages were read leaves the cache as it found it
    // but for the recency of the entries it took.
    void commit();
    void rollback();

    // Drops what `session` read (every session's when null).
    void forget(const char * session);

  private:
    struct Entry {
        std::string     key;  // the session, length-prefixed, then the element's text
        common_chat_msg msg;
        uint64_t        id   = 0;  // the entry's number, never given to another
        uint64_t        used = 0;  // the read that last took it
    };
    using Lru = std::list<Entry>;  // most recently used first

    // A read's messages given back (give_back): msgs[i] is a copy of the entry numbered ids[i].
    struct Spare {
        std::string                  session;
        std::vector<common_chat_msg> msgs;
        std::vector<uint64_t>        ids;
    };
    static constexpr size_t kMaxSpares = 8;  // sessions whose last messages are kept

    const Entry & take(std::string_view text, size_t index, const Convert & convert, size_t * n_reused);
    Spare         take_spare(const std::string & session);
    void                    drop(Lru::iterator it);
    void                    evict();

    // What the cache may hold: the message texts of a few long conversations (a ~16k-token
    // conversation is ~64 KiB of JSON; each entry holds its text and about as much again).
    static constexpr size_t kMaxBytes   = 8u << 20;
    static constexpr size_t kMaxEntries = 1u << 14;

    Lru                                               lru_;
    std::unordered_map<std::string_view, Lru::iterator> index_;  // keys view their entry's key
    std::vector<Lru::iterator>                        last_;     // the previous read's elements
    std::vector<Lru::iterator>                        committed_last_;  // last_ as of the last commit
    std::vector<Lru::iterator>                        created_;  // entries made since the last commit
    std::list<Spare>                                  spares_;   // most recently given back first
    size_t                                            bytes_ = 0;
    std::string                                       key_;      // the key being looked up
    uint64_t                                          reads_ = 0;
    uint64_t                                          ids_   = 0;  // numbers given so far
};

}  // namespace el
