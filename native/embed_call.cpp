// embed_call.cpp -- el_embed on a handle: the checks a generation call gets (a dead handle, remote
// devices) and the cancel epoch, around the handle's Embedder (embedding.h), created on first use.
//
// Invariant: an embed call never touches the generation context or the slots; el_cancel and
// el_close stop it as they stop a generation.

#include "engine.h"

#include "embedding.h"

#include <memory>
#include <mutex>
#include <string>

namespace el {

std::string Engine::embed(const char * input_json, const char * options_json, uint64_t epoch) {
    if (dead_.load()) {
        std::lock_guard<std::mutex> lock(mu);
        return error_json(EL_E_DEVICE, dead_reason_);
    }
    if (rpc_.active()) {
        // A lost server is watched per generation call (rpc.h); an embedding evaluation
        // would run unwatched, so it is refused rather than left to hang.
        fail("el_embed is not served on a handle with \"rpc\" devices");
    }
    Embedder * embedder = nullptr;
    {
        std::lock_guard<std::mutex> lock(embedder_mu_);
        if (!embedder_) {
            embedder_ = std::make_unique<Embedder>(model_, cfg_);
        }
        embedder = embedder_.get();
    }
    const auto cancelled = [&] { return closing.load() || dead_.load() || cancel_epoch.load() != epoch; };
    return dump(embedder->embed(input_json, options_json, cancelled));
}

}  // namespace el
