// rpc.h -- remote devices: llama.cpp's RPC backend (rpc-server processes) behind a handle.
//
// Invariants: an endpoint joins a model only after a round trip to it succeeded, so a
// handle never opens on a server it cannot reach, and its devices are handed to that
// model alone (never registered process-wide, so handles without "rpc" never touch a
// remote server); a connection of the handle that failed since open (a dead server, one
// stalled past the socket timeout, one cut by the watchdog) is reported by lost() after
// every evaluation, so output computed without it is never read.
//
// Failures are errors, not aborts, because scripts/fetch_llama.py applies
// native/patches/ggml-rpc-no-abort.patch to the pinned ggml-rpc (see that file).
#pragma once

#include "ggml-backend.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace el {

class RpcLink {
  public:
    RpcLink() = default;
    ~RpcLink();
    RpcLink(const RpcLink &) = delete;
    RpcLink & operator=(const RpcLink &) = delete;

    // Set the socket timeouts, probe each endpoint with a round trip and collect its
    // devices; throws an el::Error (EL_E_DEVICE) naming the first endpoint that cannot be reached.
    void connect(const std::vector<std::string> & endpoints, int32_t timeout_ms);

    bool active() const { return !endpoints_.empty(); }

    // NULL-terminated, for llama_model_params.devices: the remote devices in the order of
    // the endpoints, then the local GPUs (llama.cpp's own default order); lives as long
    // as this object.
    ggml_backend_dev_t * devices() { return devices_.data(); }
    size_t n_devices() const { return devices_.size() - 1; }
    ggml_backend_dev_t const * devices_begin() const { return devices_.data(); }

    // The endpoints whose connection failed since connect(), comma-separated; empty while
    // every connection is intact.
    std::string lost() const;

    // Whether the watchdog cut the connections (the call outlived its timeout or cancel).
    bool interrupted() const { return interrupted_.load(); }

    // Watch `stop` until end_call(): once it has been true for kGraceMs on end (an
    // evaluation blocked on a server that does not answer), fail every connection of the
    // handle so that the evaluation returns. The engine registers it once per handle.
    void begin_call(std::function<bool()> stop);
    void end_call();

    const std::vector<std::string> & endpoints() const { return endpoints_; }

    static constexpr int kGraceMs = 2000;

  private:
    void watch();

    std::vector<std::string>        endpoints_;
    std::vector<uint64_t>           failures_at_open_;
    std::vector<ggml_backend_dev_t> devices_{nullptr};

    std::mutex              mu_;
    std::condition_variable cv_;
    std::function<bool()>   stop_;  // set while a call runs
    uint64_t                call_ = 0;  // calls begun, so the watchdog tells them apart
    bool                    quit_ = false;
    std::atomic<bool>       interrupted_{false};
    std::thread             watchdog_;
};

// The local GPUs in llama.cpp's default order (integrated ones only if there is no other).
std::vector<ggml_backend_dev_t> local_gpus();

// Check one "host:port" endpoint's syntax (config parsing); throws UserError.
void check_endpoint(const std::string & endpoint);

}  // namespace el
