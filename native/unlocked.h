// unlocked.h -- a handle's mutex released for a while: for work on a call's own state (turning
// a token into text) and for everything that runs the caller's code (every stream callback).
//
// Invariant: the lock is taken again on every way out of the scope, exceptions included, so
// the code around it keeps holding the mutex it held before.
#pragma once

#include <mutex>

namespace el {

class Unlocked {
  public:
    explicit Unlocked(std::unique_lock<std::mutex> & lock) : lock_(lock) { lock_.unlock(); }
    ~Unlocked() { lock_.lock(); }
    Unlocked(const Unlocked &) = delete;
    Unlocked & operator=(const Unlocked &) = delete;

  private:
    std::unique_lock<std::mutex> & lock_;
};

}  // namespace el
