// config.h -- the el_open configuration: its keys, their defaults and their checks.
//
// Invariant: a Config that parse_config returns is complete and in range, so the
// engine never has to re-validate a setting; the defaults here are the ones
// documented in el_shim.h.
#pragma once

#include "llama.h"
#include "speculation.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace el {

struct Config {
    std::string model;
    std::optional<std::string> scope;  // calls naming no "scope" are in this one (unset: none)
    std::string cache_dir;             // the disk tier's directory ("": none)
    int32_t     disk_cache_mib = 1024;  // its bound
    int32_t     n_ctx         = 4096;
    int32_t     n_batch       = 512;
    int32_t     n_threads     = 0;
    int32_t     n_gpu_layers  = 0;
    uint32_t    seed          = LLAMA_DEFAULT_SEED;
    float       temperature   = 0.8f;
    float       top_p         = 0.95f;
    int32_t     top_k         = 40;
    float       min_p         = 0.05f;
    int32_t     max_tokens    = 512;
    bool        swa_full      = false;
    std::string flash_attn    = "auto";
    bool        deterministic = false;        // batch-shape-independent kernels (see el_shim.h)
    int32_t     n_checkpoints = 8;
    int32_t     n_seq         = 1;
    int32_t     state_cache_mib = 256;
    std::string chat_template;
    bool        tool_call_recovery = true;
    bool        log           = false;
    std::vector<std::string> rpc;             // rpc-server endpoints, "host:port"
    int32_t     rpc_timeout_ms = 60000;       // connect and per-round-trip socket timeout
    std::vector<float> tensor_split;          // share of the offloaded layers per device
    int32_t     embd_ctx      = 512;          // tokens per el_embed input (its context's size)
    std::string embd_pooling  = "auto";       // the model's own pooling, else mean
    Speculation speculative;                  // each call's default (speculation.h)
};

// Parse and check el_open's config_json; throws UserError naming the bad key.
Config parse_config(const char * config_json);

// A readable reason for the common mistakes (missing file, not GGUF), which
// llama_model_load_from_file reports only as "failed".
void check_model_file(const std::string & path);

}  // namespace el
