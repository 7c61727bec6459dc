// evaluation.cpp -- the engine's evaluation side: every llama_decode on the handle's
// context, the batches it is given, and what may stop it; see engine.h and scheduler.h.
//
// Invariant: batch_ is filled and evaluated only by the handle's evaluator thread, under mu;
// a batch's logits are read before mu is released; only evaluated tokens reach a slot's
// mirror; llama_decode's abort callback stops a batch only when every call in it should
// stop, so one call's cancel or timeout never cuts another call's step; after a fatal
// status the engine is dead and evaluates nothing again.

#include "compute_lane.h"
#include "engine.h"
#include "unlocked.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>

namespace el {

// llama_decode: 0 ok, 1 no KV slot, 2 aborted, -1 invalid batch, < -1 fatal.
void Engine::decode_failed(int32_t rc, const char * where) {
    if (rc == kDead) {
        fail(EL_E_DEVICE, dead_reason_);
    }
    if (rc == kRemoteLost) {
        // The patched ggml-rpc failed the connection without touching anything else, so
        // freeing the context and model at el_close stays safe (remote buffers on the
        // servers still alive are freed too).
        dead_free_ok_ = true;
        dead_         = true;
        dead_reason_ = "lost the RPC server " + rpc_.lost() + " while " + where +
                       (rpc_.interrupted() ? " (no answer " + std::to_string(RpcLink::kGraceMs) +
                                                 " ms after the call's timeout or cancel; the connection was cut)"
                                           : " (it died, or stalled past rpc_timeout_ms)") +
                       ". This handle is dead: close it and open a new one";
        fail(EL_E_DEVICE, dead_reason_);
    }
    if (rc < -1) {
        dead_        = true;
        dead_reason_ = "the backend failed while " + std::string(where) + " (llama_decode status " +
                       std::to_string(rc) + "); the device may be lost. This handle is dead: close it and open a new one";
        fail(EL_E_DEVICE, dead_reason_);
    }
    // 1: no room for the batch in the KV cache (the context is full); -1: a batch llama.cpp refused
    fail(rc == 1 ? EL_E_CONTEXT_FULL : EL_E_INTERNAL,
         "llama_decode failed while " + std::string(where) + " (status " + std::to_string(rc) + ")");
}

// After an evaluation on remote devices: wait for its results, then make sure every
// connection survived it; otherwise its output may be zeros and must not be read.
int32_t Engine::check_remote(int32_t rc) {
    if (!rpc_.active()) {
        return rc;
    }
    if (rc == 0) {
        llama_synchronize(ctx_);
    }
    return rpc_.lost().empty() ? rc : kRemoteLost;
}

bool Engine::should_stop(const Call & c) const {
    if (cancel_epoch.load(std::memory_order_relaxed) != c.epoch || closing.load(std::memory_order_relaxed) ||
        c.cancelled.load(std::memory_order_relaxed)) {
        return true;
    }
    return c.deadline_ns != 0 && steady::now().time_since_epoch().count() > c.deadline_ns;
}

// A batch holding several calls' tokens stops only when all of them should: the others
// go on, and a call that should stop ends at its next step.
template <typename Calls> bool Engine::all_stop(const Calls & calls) const {
    if (closing.load(std::memory_order_relaxed)) {
        return true;
    }
    return !calls.empty() && std::all_of(calls.begin(), calls.end(), [this](const Call * c) { return should_stop(*c); });
}

bool Engine::abort_callback(void * data) {
    return static_cast<Engine *>(data)->evaluation_should_stop();
}

void Engine::cancel_request(const std::string & request_id) {
    std::lock_guard<std::mutex> lock(calls_mu_);
    for (Call * c : in_flight_) {
        if (c->request_id == request_id) {
            c->cancelled = true;
        }
    }
    // A cancel may come before its call began: the call then finds its id here.
    cancelled_ids_.push_back(request_id);
    if (cancelled_ids_.size() > kRemembered) {
        cancelled_ids_.pop_front();
    }
}

// A call enters or leaves the handle (in: once its request is prepared), for
// el_cancel_request; an id cancelled before the call began stops it at once.
void Engine::track(Call * call, bool in) {
    std::lock_guard<std::mutex> lock(calls_mu_);
    if (in) {
        if (!call->request_id.empty() &&
            std::find(cancelled_ids_.begin(), cancelled_ids_.end(), call->request_id) != cancelled_ids_.end()) {
            call->cancelled = true;
        }
        in_flight_.push_back(call);
    } else {
        in_flight_.erase(std::find(in_flight_.begin(), in_flight_.end(), call));
    }
}

Engine::Working::Working(Engine & engine, std::vector<const Call *> calls) : e(engine) {
    std::lock_guard<std::mutex> lock(e.calls_mu_);
    at = e.working_.insert(e.working_.end(), std::move(calls));
}

Engine::Working::~Working() {
    std::lock_guard<std::mutex> lock(e.calls_mu_);
    e.working_.erase(at);
}

// llama_decode's abort callback and the RPC watchdog's stop condition (registered once for the
// handle's life, opening.cpp): the backend is working (an evaluation, or a slot's state saved
// or restored) and every call it works for should stop, so one call's cancel or timeout never
// cuts another's step. Calls it does not work for (waiting, turning text) neither hold the
// watchdog back nor are cut by it.
bool Engine::evaluation_should_stop() {
    std::lock_guard<std::mutex> lock(calls_mu_);
    return !working_.empty() &&
           std::all_of(working_.begin(), working_.end(), [this](const std::vector<const Call *> & w) { return all_stop(w); });
}

// llama_decode on batch_, whose tokens belong to `calls` (for the abort callback).
int32_t Engine::run_batch(const std::vector<const Call *> & calls) {
    if (!dead_reason_.empty()) {
        return kDead;  // nothing evaluated after the failure could be trusted
    }
    const bool lost = std::any_of(calls.begin(), calls.end(), [](const Call * c) { return c->device_lost; });
    const Working working(*this, calls);  // for the abort callback and the RPC watchdog
    return lost ? -3 : check_remote(on_compute_lane([this] { return llama_decode(ctx_, batch_); }));
}

// Evaluate tokens [from, to) of `toks` on top of the call's cache, one n_batch chunk per
// turn of the scheduler. Returns llama_decode's status (0 = ok; 2 when `progress` asked to
// stop). Only successfully evaluated batches reach the mirror. `on_done` runs right after
// the last chunk, before any other batch could overwrite its logits. `progress` runs the
// caller's stream callback, so it runs without the handle's mutex: a callback that blocks
// holds up its own call alone.
int32_t Engine::evaluate(Call & call, std::unique_lock<std::mutex> & lock, const std::vector<llama_token> & toks,
                         size_t from, size_t to, bool logits_last, const std::function<bool(size_t)> & progress,
                         const std::function<void()> & on_done) {
    while (from < to) {
        const size_t n = std::min<size_t>(to - from, (size_t) cfg_.n_batch);
        const int32_t rc = sched_->solo(lock, [&]() -> int32_t {
            const size_t pos0 = call.cache->tokens().size() + call.pos_shift;
            batch_.n_tokens = (int32_t) n;
            for (size_t i = 0; i < n; i++) {
                batch_.token[i]     = toks[from + i];
                batch_.pos[i]       = (llama_pos) (pos0 + i);
                batch_.n_seq_id[i]  = 1;
                batch_.seq_id[i][0] = call.cache->seq();
                batch_.logits[i]    = logits_last && from + i == to - 1;
            }
            const auto    t0 = steady::now();
            const int32_t r  = run_batch({&call});
            eval_.batches++;
            eval_.batch_tokens += n;
            eval_.ms_batches += ms_since(t0);
            if (r == 0) {
                call.cache->append(toks.data() + from, n);
                if (from + n == to && on_done) {
                    on_done();
                }
            }
            return r;
        });
        if (rc != 0) {
            return rc;
        }
        from += n;
        if (progress) {
            Unlocked unlocked(lock);
            if (!progress(from)) {
                return 2;
            }
        }
    }
    return 0;
}

// One decode step: the next token of every participant, each at its own sequence and
// position, all in one batch; then each participant reads its row of logits.
int32_t Engine::run_step(const std::vector<Scheduler::Participant *> & batch) {
    std::vector<const Call *> calls;
    std::vector<int32_t>      rows;  // each participant's token's row; its draft follows it
    int32_t                   n = 0;
    for (const Scheduler::Participant * p : batch) {
        rows.push_back(n);
        for (size_t j = 0; j <= p->draft.size(); j++, n++) {
            batch_.token[n]     = j == 0 ? p->tok : p->draft[j - 1];
            batch_.pos[n]       = p->pos + (llama_pos) j;
            batch_.n_seq_id[n]  = 1;
            batch_.seq_id[n][0] = p->seq;
            batch_.logits[n]    = true;
        }
        calls.push_back(static_cast<const Decoding *>(p)->call);
    }
    batch_.n_tokens  = n;
    const auto    t0 = steady::now();
    const int32_t rc = run_batch(calls);
    eval_.steps++;
    eval_.step_tokens += (uint64_t) n;
    eval_.ms_steps += ms_since(t0);
    if (rc == 0) {
        for (size_t i = 0; i < batch.size(); i++) {
            try {
                batch[i]->after(rows[i]);
            } catch (...) {
                batch[i]->error = std::current_exception();
            }
        }
    }
    return rc;
}

}  // namespace el
