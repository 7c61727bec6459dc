// opening.cpp -- the engine's open side: loading the model (on the CPU, local GPUs or RPC
// devices), creating its context, the chat templates and the slots, and tearing it all
// down. See engine.h (stats.cpp reports what was opened).
//
// Invariant: open() either leaves every part in place or throws with the engine safe to
// destroy half-open; the destructor never calls into a backend that failed fatally (a
// dead engine releases host memory only, unless a lost RPC server left freeing safe).

#include "engine.h"

#include "backend.h"
#include "common.h"
#include "embedding.h"
#include "model_identity.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <stdexcept>

namespace el {

namespace {

// Whose template the handle renders with, and what it can show the model.
TemplateInfo describe_template(const common_chat_templates * templates, const llama_model * model, const Config & cfg) {
    TemplateInfo info;
    info.source = !cfg.chat_template.empty()                         ? "config"
                : llama_model_chat_template(model, nullptr) != nullptr ? "model"
                                                                       : "chatml fallback";
    const std::map<std::string, bool> caps = common_chat_templates_get_caps(templates);
    const auto has = [&](const char * cap) { return caps.count(cap) == 0 || caps.at(cap); };
    info.supports_tools       = has("supports_tools");
    info.supports_system_role = has("supports_system_role");
    return info;
}

}  // namespace

Engine::~Engine() {
    if (rpc_.active()) {
        rpc_.end_call();  // the watchdog reads calls_mu_ and working_, which go first
    }
    sched_.reset();  // joins the evaluator thread before anything it used goes
    if (!dead_reason_.empty() && !dead_free_ok_) {
        // Freeing the context and model would call into the failed backend. Release
        // what lives in host memory and leave the rest: a bounded leak, not a crash.
        if (slots_) {
            slots_->release_host_state();
        }
        templates_.reset();
        grammars_.reset();
        if (batch_.token != nullptr) {
            llama_batch_free(batch_);
        }
        (void) embedder_.release();  // its context lives on the failed backend too
        return;
    }
    embedder_.reset();  // its context goes before the model it shares
    if (slots_) {
        try {
            slots_->persist();  // the disk tier keeps what the slots held, for the next handle
        } catch (...) {
        }
        slots_->clear_caches();
    }
    slots_.reset();
    templates_.reset();
    grammars_.reset();
    if (batch_.token != nullptr) {
        llama_batch_free(batch_);
    }
    if (ctx_ != nullptr) {
        llama_free(ctx_);
    }
    if (model_ != nullptr) {
        llama_model_free(model_);
    }
}

void Engine::open(const char * config_json) {
    cfg_ = parse_config(config_json);
    init_backend_once();
    if (cfg_.log) {
        enable_log_to_stderr();
    }
    check_model_file(cfg_.model);
    load_model();
    create_context();
    if (!rpc_.lost().empty()) {
        fail(EL_E_DEVICE, "lost the connection to the RPC server " + rpc_.lost() + " while loading the model");
    }

    try {
        templates_ = common_chat_templates_init(model_, cfg_.chat_template);
    } catch (const std::exception & e) {
        // the caller's own template is the input's fault; the model's, the file's
        fail(cfg_.chat_template.empty() ? EL_E_LOAD : EL_E_INVALID, std::string("chat template does not parse: ") + e.what());
    }
    template_info_ = describe_template(templates_.get(), model_, cfg_);
    grammars_.reset(patched::grammar_cache_init());

    const int32_t n_swa = llama_model_n_swa(model_);
    MemoryKind kind = MemoryKind::Trimmable;
    if (llama_model_is_recurrent(model_) || llama_model_is_hybrid(model_)) {
        kind = MemoryKind::Recurrent;
    } else if (n_swa > 0) {
        kind = cfg_.swa_full ? MemoryKind::FullWindow : MemoryKind::SlidingWindow;
    }
    slots_ = std::make_unique<Slots>(ctx_, kind, n_swa, cfg_.n_checkpoints, cfg_.n_seq, cfg_.state_cache_mib);
    if (!cfg_.cache_dir.empty() && cfg_.disk_cache_mib > 0) {
        // No identity (the file could not be read whole): no disk tier, rather than a guess.
        if (const std::string print = fingerprint(); !print.empty()) {
            slots_->set_disk(std::make_unique<DiskCache>(cfg_.cache_dir, (size_t) cfg_.disk_cache_mib << 20, print));
        }
    }
    // Every evaluation runs on the handle's evaluator thread, with one slot too (scheduler.h).
    sched_ = std::make_unique<Scheduler>(mu, (size_t) cfg_.n_seq, (size_t) cfg_.n_batch,
                                         [this](const std::vector<Scheduler::Participant *> & b) { return run_step(b); });
    if (rpc_.active()) {
        // Registered once, not per call: a call's registration could race another's end.
        rpc_.begin_call([this] { return evaluation_should_stop(); });
    }
}

// Load the weights: on the CPU, or split over the remote (RPC) devices and local GPUs
// by n_gpu_layers and tensor_split.
void Engine::load_model() {
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = cfg_.n_gpu_layers;
    // Repacked weights are multiplied by kernels that handle a batch's rows in groups, with
    // the remainder on another path: a token's logits would depend on where its batch began.
    mp.use_extra_bufts = !cfg_.deterministic;
    if (!cfg_.rpc.empty()) {
        rpc_.connect(cfg_.rpc, cfg_.rpc_timeout_ms);
        mp.devices = rpc_.devices();
    }
    if (!cfg_.tensor_split.empty()) {
        const size_t n_dev = rpc_.n_devices();
        if (rpc_.active() && cfg_.tensor_split.size() > n_dev) {
            fail("\"tensor_split\" has " + std::to_string(cfg_.tensor_split.size()) + " entries for " +
                 std::to_string(n_dev) + " devices");
        }
        tensor_split_ = cfg_.tensor_split;
        tensor_split_.resize(llama_max_devices(), 0.0f);
        mp.tensor_split = tensor_split_.data();
    }
    thread_log_errors().clear();
    model_ = llama_model_load_from_file(cfg_.model.c_str(), mp);
    if (model_ == nullptr) {
        const std::string why = rpc_.lost().empty() ? thread_log_errors()
                                                    : "lost the connection to the RPC server " + rpc_.lost();
        fail(rpc_.lost().empty() ? EL_E_LOAD : EL_E_DEVICE,
             "llama.cpp could not load the model " + cfg_.model + (why.empty() ? "" : ": " + why));
    }
    vocab_  = llama_model_get_vocab(model_);
    tokens_ = std::make_unique<TokenCache>(vocab_);
}

void Engine::create_context() {
    llama_context_params cp = llama_context_default_params();
    // Each slot gets a context of its own n_ctx tokens; 0 means the model's own context
    // length per slot (llama.cpp would read 0 as "the model's" for all slots together).
    const uint32_t per_slot = cfg_.n_ctx > 0 ? (uint32_t) cfg_.n_ctx : (uint32_t) llama_model_n_ctx_train(model_);
    cp.n_ctx           = per_slot * (uint32_t) cfg_.n_seq;
    cp.kv_unified      = false;
    cp.n_batch         = (uint32_t) cfg_.n_batch;
    cp.n_ubatch        = (uint32_t) std::min(cfg_.n_batch, 512);
    cp.n_seq_max       = (uint32_t) cfg_.n_seq;
    cp.n_threads       = cfg_.n_threads;
    cp.n_threads_batch = cfg_.n_threads;
    cp.swa_full        = cfg_.swa_full;
    // llama.cpp's default, auto, turns flash attention on for CPUs. Its CPU kernel, as patched
    // (native/patches/ggml-cpu-fa-blocked-decode.patch), decodes at depth as fast as attention
    // without it or faster on every catalogue model (2 cores, 4k tokens of context).
    cp.flash_attn_type = cfg_.flash_attn == "on"  ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                       : cfg_.flash_attn == "off" ? LLAMA_FLASH_ATTN_TYPE_DISABLED
                                                  : LLAMA_FLASH_ATTN_TYPE_AUTO;
    cp.no_perf             = true;
    cp.abort_callback      = abort_callback;
    cp.abort_callback_data = this;
    ctx_ = llama_init_from_model(model_, cp);
    if (ctx_ == nullptr) {
        const std::string & why = thread_log_errors();
        fail(EL_E_LOAD, "llama.cpp could not create a context (n_ctx " + std::to_string(cfg_.n_ctx) +
                            "; out of memory?)" + (why.empty() ? "" : ": " + why));
    }
    if (cfg_.deterministic) {
        if (const std::string why = patched::deterministic_refusal(model_); !why.empty()) {
            fail(why);
        }
        use_reference_cpu_kernels(ctx_);
        if (!context_uses_flash_attn(ctx_) && !llama_model_is_recurrent(model_)) {
            fail("\"deterministic\" needs flash attention, which llama.cpp cannot use for this model");
        }
    }
    n_ctx_ = (int32_t) llama_n_ctx_seq(ctx_);
    batch_ = llama_batch_init(cfg_.n_batch, 0, 1);
}

// What a sequence's saved state depends on, beyond its tokens: the model file (the SHA-256 of
// its content: a file with other weights at the same size and mtime is another model,
// model_identity.h), the build, and the settings that change the cache's layout or its
// values (the kernels that computed them, the cells a slot has). A disk-tier entry is used
// only where all of it is equal (disk_cache.h). "" when the file cannot be digested.
std::string Engine::fingerprint() const {
    const std::string sha256 = model_digest(cfg_.model, cfg_.cache_dir);
    if (sha256.empty()) {
        return "";
    }
    char desc[256];
    llama_model_desc(model_, desc, sizeof(desc));
    return json{{"sha256", sha256}, {"desc", desc}, {"n_params", llama_model_n_params(model_)},
                {"build", json::parse(patched::build_info())}, {"n_ctx", n_ctx_},
                {"n_ubatch", std::min(cfg_.n_batch, 512)}, {"swa_full", cfg_.swa_full},
                {"flash_attn", context_uses_flash_attn(ctx_)}, {"deterministic", cfg_.deterministic},
                {"n_gpu_layers", cfg_.n_gpu_layers}, {"rpc", rpc_.endpoints()}, {"tensor_split", cfg_.tensor_split}}
        .dump();
}

}  // namespace el
