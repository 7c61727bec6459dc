// job.h -- a function handed to another thread to run, and what came of it: the prompt
// chunks a call hands its handle's evaluator (scheduler.h) and the evaluations the
// evaluators hand the process's compute lane (compute_lane.h).
//
// Invariant: the thread that runs a job never lets its exception escape; the waiting
// thread gets it back from outcome(). `done` is read and written under the mutex of
// whoever queues the job.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>

namespace el {

struct Job {
    const std::function<int32_t()> * fn;
    int32_t                          rc   = 0;
    bool                             done = false;
    std::exception_ptr               error;

    void run() noexcept {
        try {
            rc = (*fn)();
        } catch (...) {
            error = std::current_exception();
        }
    }
    int32_t outcome() const {
        if (error) {
            std::rethrow_exception(error);
        }
        return rc;
    }
};

}  // namespace el
