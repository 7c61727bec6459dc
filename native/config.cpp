// config.cpp -- parsing el_open's config_json; see config.h.

#include "config.h"

#include "common.h"
#include "json_args.h"
#include "rpc.h"

#include "ggml-rpc.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <fstream>

namespace el {

namespace {

// "rpc", "rpc_timeout_ms" and "tensor_split": where the layers go. With remote servers and
// no "n_gpu_layers", every layer is offloaded (split over the devices); without them the
// local default (0) stands.
void parse_offload(const json & j, Config & c) {
    if (const json * rpc = find(j, "rpc")) {
        if (!rpc->is_array()) {
            fail("\"rpc\" must be an array of \"host:port\" strings");
        }
        for (const json & ep : *rpc) {
            if (!ep.is_string()) {
                fail("\"rpc\" must be an array of \"host:port\" strings");
            }
            check_endpoint(ep.get<std::string>());
            if (std::find(c.rpc.begin(), c.rpc.end(), ep.get<std::string>()) != c.rpc.end()) {
                fail("\"rpc\" lists " + ep.get<std::string>() + " twice");
            }
            c.rpc.push_back(ep.get<std::string>());
        }
        if (c.rpc.size() > GGML_RPC_MAX_SERVERS) {
            fail("\"rpc\" lists more than " + std::to_string(GGML_RPC_MAX_SERVERS) + " servers");
        }
        if (!c.rpc.empty() && find(j, "n_gpu_layers") == nullptr) {
            c.n_gpu_layers = -1;
        }
    }
    c.rpc_timeout_ms = (int32_t) get_int(j, "rpc_timeout_ms", c.rpc_timeout_ms, 100, 24 * 3600 * 1000);
    if (const json * split = find(j, "tensor_split")) {
        if (!split->is_array() || split->size() > llama_max_devices()) {
            fail("\"tensor_split\" must be an array of at most " + std::to_string(llama_max_devices()) +
                 " non-negative numbers, one per device");
        }
        for (const json & x : *split) {
            if (!x.is_number() || x.get<double>() < 0 || x.get<double>() > 1e9) {
                fail("\"tensor_split\" entries must be non-negative numbers");
            }
            c.tensor_split.push_back(x.get<float>());
        }
    }
}

// "deterministic": logits that do not depend on how the prompt was split into batches.
// Measured (docs/determinism.md) to need, besides ggml's reference CPU kernels (engine):
// flash attention on (without it, attention sums over cache cells in SIMD lanes by cell
// index, and decode takes another matrix path than prefill), full-size sliding-window
// caches (a windowed cache reuses cells, so the order attention visits them depends on
// the batch history), and no weight repacking. Only CPU kernels were measured: the option
// refuses what would break the promise instead of silently not keeping it.
void check_deterministic(const json & j, Config & c) {
    if (!c.deterministic) {
        return;
    }
    if (!c.rpc.empty() || c.n_gpu_layers != 0) {
        fail("\"deterministic\" is only kept on the CPU: it cannot be combined with \"rpc\" or \"n_gpu_layers\"");
    }
    if (c.flash_attn == "off") {
        fail("\"deterministic\" needs flash attention: without it llama.cpp's CPU attention changes its "
             "reduction order with the batch shape (leave \"flash_attn\" at \"auto\" or \"on\")");
    }
    if (find(j, "swa_full") != nullptr && !c.swa_full) {
        fail("\"deterministic\" needs \"swa_full\": true: a sliding-window cache reuses cells, and the order "
             "attention visits them then depends on the batch history");
    }
    c.flash_attn = "on";
    c.swa_full   = true;
}

}  // namespace

Config parse_config(const char * config_json) {
    json j = parse_json_arg(config_json, "config");
    if (!j.is_object()) {
        fail("config must be a JSON object");
    }
    reject_unknown_keys(j, {"model", "n_ctx", "n_batch", "n_threads", "n_gpu_layers", "seed", "temperature", "top_p",
                            "top_k", "min_p", "max_tokens", "swa_full", "flash_attn", "deterministic", "n_checkpoints", "n_seq", "state_cache_mib", "chat_template",
                            "tool_call_recovery", "log", "rpc", "rpc_timeout_ms", "tensor_split", "embd_ctx",
                            "embd_pooling", "speculative", "scope", "cache_dir", "disk_cache_mib"}, "config");
    Config c;
    c.model = get_string(j, "model", "");
    if (c.model.empty()) {
        fail("config needs \"model\": the path of a .gguf file");
    }
    c.n_ctx         = (int32_t) get_int(j, "n_ctx", c.n_ctx, 0, 1 << 24);
    c.n_batch       = (int32_t) get_int(j, "n_batch", c.n_batch, 1, 1 << 16);
    c.n_threads     = (int32_t) get_int(j, "n_threads", 0, 0, 1024);
    c.n_gpu_layers  = (int32_t) get_int(j, "n_gpu_layers", c.n_gpu_layers, -1, 100000);
    c.seed          = (uint32_t) get_int(j, "seed", c.seed, 0, UINT32_MAX);
    c.temperature   = (float) get_number(j, "temperature", c.temperature, -1e9, 1e9);
    c.top_p         = (float) get_number(j, "top_p", c.top_p, 0.0, 1.0);
    c.top_k         = (int32_t) get_int(j, "top_k", c.top_k, 0, INT32_MAX);
    c.min_p         = (float) get_number(j, "min_p", c.min_p, 0.0, 1.0);
    c.max_tokens    = (int32_t) get_int(j, "max_tokens", c.max_tokens, 1, INT32_MAX);
    c.swa_full      = get_bool(j, "swa_full", c.swa_full);
    c.flash_attn    = get_string(j, "flash_attn", c.flash_attn);
    if (c.flash_attn != "auto" && c.flash_attn != "on" && c.flash_attn != "off") {
        fail("\"flash_attn\" must be \"auto\", \"on\" or \"off\"");
    }
    c.n_checkpoints = (int32_t) get_int(j, "n_checkpoints", c.n_checkpoints, 0, 1024);
    c.n_seq         = (int32_t) get_int(j, "n_seq", c.n_seq, 1, 64);
    c.state_cache_mib = (int32_t) get_int(j, "state_cache_mib", c.state_cache_mib, 0, 1 << 20);
    c.chat_template = get_string(j, "chat_template", "");
    c.tool_call_recovery = get_bool(j, "tool_call_recovery", c.tool_call_recovery);
    c.log           = get_bool(j, "log", c.log);
    c.embd_ctx      = (int32_t) get_int(j, "embd_ctx", c.embd_ctx, 8, 1 << 20);
    c.embd_pooling  = get_string(j, "embd_pooling", c.embd_pooling);
    if (c.embd_pooling != "auto" && c.embd_pooling != "mean" && c.embd_pooling != "cls" && c.embd_pooling != "last") {
        fail("\"embd_pooling\" must be \"auto\", \"mean\", \"cls\" or \"last\"");
    }
    c.cache_dir      = get_string(j, "cache_dir", "");
    c.disk_cache_mib = (int32_t) get_int(j, "disk_cache_mib", c.disk_cache_mib, 0, 1 << 30);
    if (const json * s = find(j, "scope")) {
        if (!s->is_string() || s->get<std::string>().size() > 256) {
            fail("\"scope\" must be a string of at most 256 bytes");
        }
        c.scope = s->get<std::string>();
    }
    if (const json * s = find(j, "speculative")) {
        c.speculative = read_speculation(*s, "speculative");
    }
    parse_offload(j, c);
    c.deterministic = get_bool(j, "deterministic", c.deterministic);
    check_deterministic(j, c);
    if (c.n_threads == 0) {
        c.n_threads = common_cpu_get_num_math();
    }
    return c;
}

void check_model_file(const std::string & path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) {
        fail(EL_E_NOT_FOUND, "model file not found or not readable: " + path);
    }
    char magic[4] = {0, 0, 0, 0};
    f.read(magic, 4);
    if (f.gcount() != 4 || std::memcmp(magic, "GGUF", 4) != 0) {
        fail(EL_E_LOAD, "not a GGUF model file (bad magic): " + path);
    }
}

}  // namespace el
