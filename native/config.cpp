// config.cpp -- parsing el_open's config_json; see config.h.

#include "config.h"

#include "common.h"
#include "json_args.h"

#include <climits>
#include <cstring>
#include <fstream>

namespace el {

Config parse_config(const char * config_json) {
    json j = parse_json_arg(config_json, "config");
    if (!j.is_object()) {
        fail("config must be a JSON object");
    }
    reject_unknown_keys(j, {"model", "n_ctx", "n_batch", "n_threads", "n_gpu_layers", "seed", "temperature", "top_p",
                            "top_k", "min_p", "max_tokens", "swa_full", "flash_attn", "n_checkpoints", "n_seq", "state_cache_mib", "chat_template",
                            "tool_call_recovery", "log"}, "config");
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
    if (c.n_threads == 0) {
        c.n_threads = common_cpu_get_num_math();
    }
    return c;
}

void check_model_file(const std::string & path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) {
        fail("model file not found or not readable: " + path);
    }
    char magic[4] = {0, 0, 0, 0};
    f.read(magic, 4);
    if (f.gcount() != 4 || std::memcmp(magic, "GGUF", 4) != 0) {
        fail("not a GGUF model file (bad magic): " + path);
    }
}

}  // namespace el
