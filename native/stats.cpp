// stats.cpp -- el_stats: what a handle opened (model, context, devices, kernels) and what it has
// done since (its caches, its evaluations). See engine.h.
//
// Invariant: a report reads the engine under the handle's mutex and changes nothing.

#include "engine.h"

#include "backend.h"

#include <string>
#include <vector>

namespace el {

// The devices layers can be offloaded to: the remote ones and the local GPUs.
json Engine::device_names() const {
    json names = json::array();
    const std::vector<ggml_backend_dev_t> devs =
        rpc_.active() ? std::vector<ggml_backend_dev_t>(rpc_.devices_begin(), rpc_.devices_begin() + rpc_.n_devices())
                      : local_gpus();
    for (ggml_backend_dev_t d : devs) {
        names.push_back(std::string(ggml_backend_dev_name(d)) + " (" + ggml_backend_dev_description(d) + ")");
    }
    return names;
}

json Engine::stats() const {
    char desc[256];
    llama_model_desc(model_, desc, sizeof(desc));
    return json{
        {"model", cfg_.model},
        {"description", desc},
        {"n_ctx", n_ctx_},
        {"n_threads", cfg_.n_threads},
        {"n_swa", llama_model_n_swa(model_)},
        {"swa_full", cfg_.swa_full},
        {"flash_attn", cfg_.flash_attn},
        {"flash_attn_in_use", context_uses_flash_attn(ctx_)},
        {"deterministic", cfg_.deterministic},
        {"recurrent", llama_model_is_recurrent(model_) || llama_model_is_hybrid(model_)},
        {"n_gpu_layers", cfg_.n_gpu_layers},
        {"rpc", rpc_.endpoints()},
        {"devices", device_names()},
        {"chat_template", {{"source", template_info_.source},
                           {"supports_tools", template_info_.supports_tools},
                           {"supports_system_role", template_info_.supports_system_role}}},
        {"cache", slots_->stats()},
        {"evaluation", {{"decode_steps", eval_.steps},
                        {"decode_tokens", eval_.step_tokens},
                        {"ms_decode_steps", eval_.ms_steps},
                        {"prompt_batches", eval_.batches},
                        {"prompt_tokens", eval_.batch_tokens},
                        {"ms_prompt_batches", eval_.ms_batches}}},
        {"abi_version", EL_ABI_VERSION},
    };
}

}  // namespace el
