// parser_cache.cpp -- see parser_cache.h.
#include "parser_cache.h"

namespace el {

common_peg_arena ParserCache::load(const std::string & serialized) {
    for (auto it = recent_.begin(); it != recent_.end(); ++it) {
        if (it->first == serialized) {
            if (it != recent_.begin()) {
                auto hit = std::move(*it);
                recent_.erase(it);
                recent_.push_front(std::move(hit));
            }
            return recent_.front().second;
        }
    }
    common_peg_arena arena;
    arena.load(serialized);  // throws on a malformed parser: nothing is kept
    recent_.emplace_front(serialized, arena);
    if (recent_.size() > kKeep) {
        recent_.pop_back();
    }
    return arena;
}

}  // namespace el
