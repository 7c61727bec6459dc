// engine_call.h -- what one generate call holds while it runs (Engine::Prepared), shared
// by the files that carry out its steps: engine.cpp (the steps) and token_choice.cpp (the
// token after each evaluation). Private to the engine; nothing outside native/ sees it.
//
// Invariant: a Prepared belongs to the caller's thread for the whole call; the evaluator
// thread touches it only inside a step's `after` callback, under the handle's mutex.
#pragma once

#include "engine.h"
#include "request.h"
#include "result.h"
#include "sampling.h"

#include <vector>

namespace el {

// run()'s state: the parsed request, its sampler, the report, and the token chosen from
// the last evaluation's logits (chosen under the handle's mutex, before any later batch
// can overwrite them; used once the call has turned the previous token into text).
struct Engine::Prepared {
    Request                 req;
    Call                    call;
    CallReport              rep;
    common_sampler_ptr      sampler;
    common_sampler_ptr      answer_sampler;  // Request::answer_grammar's, until the first token
    steady::time_point      t0;
    bool                    have_next = false;  // false: forced-only text ended
    llama_token             next      = 0;
    bool                    next_argmax = false;  // `next` was read off the logits (n_argmax)
    json                    next_logprob;
    // Drafted tokens the last step accepted, in order, with whether each was read off the
    // logits (n_argmax); the decode loop turns them into text before `next`.
    std::vector<std::pair<llama_token, bool>> accepted;
    DraftPace               pace;  // how long the next draft may be (speculation.h)
};
}  // namespace el
