// scheduler.cpp -- admission and the evaluator thread; see scheduler.h.

#include "scheduler.h"
#include "compute_lane.h"
#include "timing.h"

#include <algorithm>

namespace el {

namespace {

// How long a step waits for the decoding calls that have not submitted their token yet
// (they are turning the last one into text, or in a stream callback). Each one that misses
// a step costs a whole extra step; one that blocks in its callback cannot hold the others
// up for longer than this.
constexpr auto kStepGrace = std::chrono::milliseconds(10);

// How often a waiting call looks at its stop condition (el_cancel does not signal).
constexpr auto kPoll = std::chrono::milliseconds(5);

}  // namespace

Scheduler::Scheduler(std::mutex & mu, size_t n_slots, size_t max_step, StepFn step)
    : mu_(mu), n_slots_(n_slots), max_step_(std::max<size_t>(1, max_step)), step_fn_(std::move(step)) {
    evaluator_ = std::thread([this] {
        name_this_thread("el-evaluator");
        loop();
    });
}

Scheduler::~Scheduler() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        quit_ = true;
    }
    cv_.notify_all();
    evaluator_.join();
}

bool Scheduler::admit(std::unique_lock<std::mutex> & lock, const std::function<bool()> & stop,
                      const std::function<bool()> & can_start) {
    const void * me = &lock;  // any address unique to this waiting call
    arrivals_.push_back(Arrival{me, &can_start});
    auto leave_queue = [&] {
        arrivals_.erase(std::find_if(arrivals_.begin(), arrivals_.end(), [&](const Arrival & a) { return a.id == me; }));
        cv_.notify_all();
    };
    for (;;) {
        if (stop()) {  // also when its turn came: a call cancelled while it waited never starts
            leave_queue();
            return false;
        }
        if (running_ < n_slots_ && first_startable() == me) {
            break;
        }
        cv_.wait_for(lock, kPoll);
    }
    leave_queue();
    running_++;
    return true;
}

// The oldest waiting call that could start now, were a slot's worth of room free.
const void * Scheduler::first_startable() const {
    for (const Arrival & a : arrivals_) {
        if ((*a.can_start)()) {
            return a.id;
        }
    }
    return nullptr;
}

void Scheduler::leave() {
    running_--;
    cv_.notify_all();
}

int32_t Scheduler::solo(std::unique_lock<std::mutex> & lock, const std::function<int32_t()> & fn) {
    Job job{&fn};
    jobs_.push_back(&job);
    cv_.notify_all();
    cv_.wait(lock, [&] { return job.done; });
    return job.outcome();
}

void Scheduler::enter_decode(Participant & p) {
    p.late   = false;
    p.queued = false;
    decoders_.push_back(&p);
}

void Scheduler::leave_decode(Participant & p) {
    decoders_.erase(std::find(decoders_.begin(), decoders_.end(), &p));
    cv_.notify_all();  // a step may have been waiting for this call's token
}

void Scheduler::step(std::unique_lock<std::mutex> & lock, Participant & p) {
    p.done   = false;
    p.error  = nullptr;
    p.queued = true;
    p.late   = false;
    if (pending_.empty()) {
        first_pending_ = steady::now();
    }
    pending_.push_back(&p);
    cv_.notify_all();
    cv_.wait(lock, [&] { return p.done; });
    if (p.error) {
        std::rethrow_exception(p.error);
    }
}

void Scheduler::wait_a_little(std::unique_lock<std::mutex> & lock) { cv_.wait_for(lock, kPoll); }

// A step runs once every decoding call that is not late has submitted its token, or when
// the grace period of the oldest token ran out.
bool Scheduler::step_ready() const {
    if (pending_.empty()) {
        return false;
    }
    const size_t on_time = (size_t) std::count_if(decoders_.begin(), decoders_.end(), [](const Participant * d) { return !d->late; });
    return pending_.size() >= on_time || steady::now() >= first_pending_ + kStepGrace;
}

// Steps and prompt chunks alternate: right after a step no token is pending yet, so a
// waiting chunk goes next, and the calls' next tokens form the step after it.
void Scheduler::loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!quit_) {
        if (step_ready()) {
            run_step();
        } else if (!jobs_.empty()) {
            Job * job = jobs_.front();
            jobs_.pop_front();
            job->run();
            job->done = true;
            cv_.notify_all();
        } else if (!pending_.empty()) {
            cv_.wait_until(lock, first_pending_ + kStepGrace);
        } else {
            cv_.wait(lock);
        }
    }
}

// One batch of the oldest pending tokens (at most max_step, drafts counted), in sequence
// order: llama.cpp puts consecutive sequences of a multi-stream cache into one ubatch.
void Scheduler::run_step() {
    size_t n = 0, tokens = 0;
    while (n < pending_.size() && (n == 0 || tokens + 1 + pending_[n]->draft.size() <= max_step_)) {
        tokens += 1 + pending_[n]->draft.size();
        n++;
    }
    std::vector<Participant *> batch(pending_.begin(), pending_.begin() + (std::ptrdiff_t) n);
    pending_.erase(pending_.begin(), pending_.begin() + (std::ptrdiff_t) n);
    first_pending_ = steady::now();
    for (Participant * d : decoders_) {
        // a call that has not submitted its token by now missed this step (its stream
        // callback blocks, say): the next steps do not wait for it until it submits again
        d->late = !d->queued;
    }
    for (Participant * p : batch) {
        p->queued = false;
    }
    std::sort(batch.begin(), batch.end(), [](const Participant * a, const Participant * b) { return a->seq < b->seq; });
    for (Participant * p : batch) {
        p->step_size = batch.size();
    }
    int32_t rc = 0;
    std::exception_ptr error;
    try {
        rc = step_fn_(batch);
    } catch (...) {
        error = std::current_exception();
    }
    for (Participant * p : batch) {
        p->rc = rc;
        if (error && !p->error) {
            p->error = error;
        }
        p->done = true;
    }
    cv_.notify_all();
}

}  // namespace el
