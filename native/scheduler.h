// scheduler.h -- who runs next on a handle's context: the admission of calls (at most one
// per slot, in arrival order) and the handle's evaluator thread, which orders every
// evaluation, combining the next token of every decoding call into one batch (continuous
// batching), with prompt chunks of joining calls evaluated between those steps. One slot
// or several, the calling threads never evaluate: ggml computes with OpenMP, whose worker
// team belongs to the thread that evaluates, and two live teams on the same cores (a call
// from the main thread, the next from another) made decode ~35 % slower on 2 cores. The
// llama_decode itself runs on the process's compute lane (compute_lane.h), so that two
// handles do not make two teams either.
// Between, not inside: with a cache stream per slot llama.cpp splits a mixed batch into the
// same ubatches anyway (split_equal), and one llama_decode would tie a chunk's abort or
// failure to the other calls' tokens (docs/reuse.md, "Calls at once").
//
// Invariant: everything that touches the context runs under the handle's mutex, and a
// step's logits are consumed (each participant's next token chosen, by `after`) before that
// mutex is released, so no later batch overwrites logits a call has not read. One thread
// orders every llama_decode of a handle, and one thread (the lane) runs them all. No call
// holds up another beyond what it computes: admission passes over a call that cannot start
// yet (its session's slot serves another call) to the next one that can, and a step waits
// for a decoding call's token at most kStepGrace once: a call that missed a step is not
// waited for again until it submits its next token.
#pragma once

#include "job.h"
#include "llama.h"

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace el {

class Scheduler {
  public:
    // One decoding call's token for the next step, and what to do once it is evaluated.
    struct Participant {
        llama_token                     tok = 0;
        std::vector<llama_token>        draft;    // tokens after `tok`, at pos + 1 ..., to verify (speculation.h)
        llama_seq_id                    seq = 0;
        llama_pos                       pos = 0;
        std::function<void(int32_t)>    after;    // tok's row of the batch (its draft's follow): read the logits, choose
        int32_t                         rc   = 0;  // llama_decode's status for the step
        size_t                          step_size = 0;  // calls whose tokens the step evaluated
        bool                            done = false;
        bool                            queued = false;  // its token waits for a step
        bool                            late   = false;  // missed the last step: not waited for
        std::exception_ptr              error;    // thrown by `after`, rethrown on the call's thread
    };
    // Evaluates one batch of one token (and its draft) per participant and calls each one's
    // `after` with the row of its token. A participant's token and draft never exceed max_step.
    using StepFn = std::function<int32_t(const std::vector<Participant *> &)>;

    // Starts the evaluator thread; the destructor stops and joins it.
    Scheduler(std::mutex & mu, size_t n_slots, size_t max_step, StepFn step);
    ~Scheduler();
    Scheduler(const Scheduler &) = delete;
    Scheduler & operator=(const Scheduler &) = delete;

    // Wait until this call may start: at most n_slots calls run, and of the calls waiting,
    // the oldest one whose `can_start` is true (its slot is free) goes first; a call that
    // cannot start never keeps a later one waiting. False if `stop` turned true first. `lock`
    // holds the handle's mutex on entry and exit, and is not released between a true
    // `can_start` and the return.
    bool admit(std::unique_lock<std::mutex> & lock, const std::function<bool()> & stop,
               const std::function<bool()> & can_start);
    void leave();  // a call admitted by admit() ended (mutex held)
    size_t running() const { return running_; }  // calls admitted and not yet left (mutex held)

    // Run one evaluation (a prompt chunk) on the evaluator; returns fn's status.
    int32_t solo(std::unique_lock<std::mutex> & lock, const std::function<int32_t()> & fn);

    // Decoding calls: between enter_decode and leave_decode a call takes part in every
    // step it submits a token to; step() returns once that token was evaluated.
    void enter_decode(Participant & p);
    void leave_decode(Participant & p);
    void step(std::unique_lock<std::mutex> & lock, Participant & p);

    // Wait a little for any change (a slot freed, a call ended), or notify of one.
    void wait_a_little(std::unique_lock<std::mutex> & lock);
    void notify() { cv_.notify_all(); }

  private:
    struct Arrival {
        const void *                  id;
        const std::function<bool()> * can_start;
    };

    void loop();
    bool step_ready() const;
    void run_step();
    const void * first_startable() const;

    std::mutex &                  mu_;
    std::condition_variable       cv_;
    const size_t                  n_slots_;
    const size_t                  max_step_;
    StepFn                        step_fn_;
    std::deque<Arrival>           arrivals_;     // calls waiting for admission, oldest first
    size_t                        running_  = 0;  // admitted calls
    std::vector<Participant *>    decoders_;      // calls between enter_decode and leave_decode
    std::vector<Participant *>    pending_;       // tokens submitted for the next step
    std::chrono::steady_clock::time_point first_pending_{};
    std::deque<Job *>             jobs_;          // prompt chunks waiting for the evaluator
    bool                          quit_ = false;
    std::thread                   evaluator_;
};

}  // namespace el
