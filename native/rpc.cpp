// rpc.cpp -- probing and registering rpc-server endpoints, noticing a lost connection, and
// the watchdog that cuts a connection a call is stuck on; see rpc.h.

#include "rpc.h"

#include "backend.h"
#include "ggml-rpc.h"
#include "json_args.h"
#include "patched.h"
#include "timing.h"

#include <algorithm>

namespace el {

namespace {

// The first line llama.cpp logged about the failure, for the error message.
std::string first_logged_line() {
    std::string why = thread_log_errors();
    why = why.substr(0, why.find('\n'));
    return why.empty() ? "" : " (" + why + ")";
}

}  // namespace

void check_endpoint(const std::string & endpoint) {
    const size_t colon = endpoint.rfind(':');
    const std::string port = colon == std::string::npos ? "" : endpoint.substr(colon + 1);
    const bool digits = !port.empty() && port.size() <= 5 &&
                        std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (colon == 0 || colon == std::string::npos || endpoint.find(':') != colon || !digits ||
        std::stoi(port) < 1 || std::stoi(port) > 65535) {
        fail("\"rpc\" entries must be \"host:port\" (IPv4 address or host name, port 1-65535), got \"" + endpoint +
             "\"");
    }
}

RpcLink::~RpcLink() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        quit_ = true;
    }
    cv_.notify_all();
    if (watchdog_.joinable()) {
        watchdog_.join();
    }
}

void RpcLink::connect(const std::vector<std::string> & endpoints, int32_t timeout_ms) {
    // Process-wide in ggml-rpc: connections opened from now on use these timeouts.
    patched::rpc_require(endpoints.empty() ? "" : endpoints.front());
    patched::rpc_set_timeouts(std::min(timeout_ms, 10000), timeout_ms);
    devices_.clear();
    for (const std::string & ep : endpoints) {
        thread_log_errors().clear();
        if (!patched::rpc_check(ep.c_str())) {
            fail(EL_E_DEVICE, "cannot reach the RPC server " + ep + first_logged_line() +
                 "; is rpc-server running there and reachable from this machine?");
        }
        failures_at_open_.push_back(patched::rpc_failures(ep.c_str()));
        ggml_backend_reg_t reg = ggml_backend_rpc_add_server(ep.c_str());
        if (reg == nullptr || ggml_backend_reg_dev_count(reg) == 0) {
            fail(EL_E_DEVICE, "the RPC server " + ep + " reports no devices");
        }
        for (size_t i = 0; i < ggml_backend_reg_dev_count(reg); i++) {
            devices_.push_back(ggml_backend_reg_dev_get(reg, i));
        }
        endpoints_.push_back(ep);
    }
    // Local GPUs after the remote devices, as llama.cpp orders them by default (the last
    // layers and the output then run locally, which keeps the logits off the network).
    const std::vector<ggml_backend_dev_t> gpus = local_gpus();
    devices_.insert(devices_.end(), gpus.begin(), gpus.end());
    devices_.push_back(nullptr);
}

std::vector<ggml_backend_dev_t> local_gpus() {
    std::vector<ggml_backend_dev_t> gpus, igpus;
    for (size_t i = 0; i < ggml_backend_dev_count(); i++) {
        ggml_backend_dev_t dev = ggml_backend_dev_get(i);
        if (ggml_backend_dev_type(dev) == GGML_BACKEND_DEVICE_TYPE_GPU) {
            gpus.push_back(dev);
        } else if (ggml_backend_dev_type(dev) == GGML_BACKEND_DEVICE_TYPE_IGPU) {
            igpus.push_back(dev);
        }
    }
    return gpus.empty() ? igpus : gpus;
}

std::string RpcLink::lost() const {
    std::string out;
    for (size_t i = 0; i < endpoints_.size(); i++) {
        if (patched::rpc_failures(endpoints_[i].c_str()) != failures_at_open_[i]) {
            out += (out.empty() ? "" : ", ") + endpoints_[i];
        }
    }
    return out;
}

void RpcLink::begin_call(std::function<bool()> stop) {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = std::move(stop);
        call_++;
        if (!watchdog_.joinable()) {
            watchdog_ = std::thread([this] { watch(); });
        }
    }
    cv_.notify_all();
}

void RpcLink::end_call() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = nullptr;
    }
    cv_.notify_all();
}

// Poll the stop condition (the engine's: a remote evaluation runs and every call in it was
// cancelled or timed out) every 100 ms. The engine honours a stop between evaluations; an
// evaluation still running kGraceMs after its condition turned true, and all along since, is
// blocked on a server that does not answer, and only failing the connection frees it.
void RpcLink::watch() {
    std::unique_lock<std::mutex> lock(mu_);
    steady::time_point since{};
    bool fired = false;
    uint64_t seen = 0;
    while (!quit_) {
        if (seen != call_) {  // a new call: nothing of the last one carries over
            seen = call_;
            since = {};
            fired = false;
        }
        if (!stop_) {
            cv_.wait(lock);
            continue;
        }
        if (!fired && !stop_()) {
            since = {};  // the evaluation it watched ended, or one that goes on began
        } else if (!fired) {
            if (since == steady::time_point{}) {
                since = steady::now();
            } else if (steady::now() - since >= std::chrono::milliseconds(kGraceMs)) {
                interrupted_ = true;
                fired = true;
                for (const std::string & ep : endpoints_) {
                    patched::rpc_interrupt(ep.c_str());
                }
            }
        }
        cv_.wait_for(lock, std::chrono::milliseconds(100));
    }
}

}  // namespace el
