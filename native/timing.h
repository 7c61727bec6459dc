// timing.h -- the one clock the shim's reported timings are read from.
//
// Invariant: every ms_* figure a call or el_stats reports is steady-clock milliseconds
// taken with ms_since, so the phases of one call add up on the same clock.
#pragma once

#include <chrono>

namespace el {

using steady = std::chrono::steady_clock;

// Milliseconds since t0.
inline double ms_since(steady::time_point t0) {
    return std::chrono::duration<double, std::milli>(steady::now() - t0).count();
}

}  // namespace el
