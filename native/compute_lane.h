// compute_lane.h -- the one thread per process on which every llama_decode of every
// handle runs. ggml computes on the CPU with OpenMP, whose worker team belongs to the
// thread that evaluates. Once libgomp manages more threads than the machine has CPUs, it
// spins only 100 times at a barrier before it sleeps (its GOMP_SPINCOUNT rule), and ggml
// meets a barrier at every node, hundreds per token. Handles that evaluated on threads of
// their own kept a team each: on 2 cores, two gemma-3-270m handles used in turn took 32 ms
// per token against 20 ms for either alone. On one thread the process has one team, however
// many handles it opens; the price is that two handles never compute at the same time.
//
// Invariant: run returns only after fn ran to its end on the lane's thread (an exception it
// threw is rethrown to the caller); one fn at a time, in the order they were handed in. A
// child of fork() starts a lane of its own on first use (the parent's thread is not there).
#pragma once

#include <cstdint>
#include <functional>

namespace el {

// Runs fn on the process's evaluating thread and returns its result; the caller waits.
// Called from that thread itself (fn calling run), it runs fn in place.
int32_t on_compute_lane(const std::function<int32_t()> & fn);

// Names the calling thread (on Linux; elsewhere it does nothing), so that a process's
// threads tell which are the library's: "el-compute" (the lane, and the OpenMP workers it
// starts, which inherit its name) and "el-evaluator" (one per handle).
void name_this_thread(const char * name);

}  // namespace el
