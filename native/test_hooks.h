// test_hooks.h -- the "_test" option: faults a test plants and extra reports it asks for, so
// that each differential suite can show it would catch the smallest realistic fault.
//
// Invariant: compiled only with EL_TEST_HOOKS. Without it TestHooks has no field: each hook is a
// constant that says "off", so the code that honours a hook folds away and the release library
// holds neither a hook's field nor its name ("_test" is then refused as not compiled in).
#pragma once

#include "chat.h"
#include "json_args.h"
#include "prompt_cache.h"

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace el {

// One realistic fault planted in the reused prefix, so that the reuse oracle can show it sees a
// single wrong token (tests/oracle.py).
enum class Corruption {
    None,
    Stale,      // the token at `at` is another token of the prompt
    Missing,    // the token at `at` is left out
    Duplicate,  // the token at `at` is there twice
    Other,      // the slot holds the conversation that was there before, not this one
    Shift,      // the tokens from `at` on sit one position later than they should
};

struct TestHooks {
#ifdef EL_TEST_HOOKS
    UnsafeReuse              unsafe_reuse        = UnsafeReuse::None;
    bool                     fail_after_prefill  = false;
    bool                     device_lost         = false;  // llama_decode reports a fatal backend error
    bool                     sampler_chain       = false;  // no greedy fast path: the full chain samples
    bool                     has_canned_output   = false;  // parse this text instead of sampling
    std::string              canned_output;
    Corruption               corrupt             = Corruption::None;
    int64_t                  corrupt_at          = -1;     // index in the reused prefix; < 0 counts from its end
    std::vector<llama_token> forced;                       // decode these tokens first instead of sampling
    bool                     forced_only         = false;  // and then end as if the model ended ("force_output")
    int32_t                  probe               = 0;      // > 0: copy up to this many prompt tokens instead of decoding
    int64_t                  leak_bytes          = 0;      // keep this much memory until exit (shows the soak can fail)
    bool                     check_tokens        = false;  // also tokenize from scratch; fail if they differ
    bool                     prepare_only        = false;  // return after preparing, before a slot is picked
    bool                     tokens_ignore_edits = false;  // a token cache that ignores edits (must be caught)
    bool                     check_messages      = false;  // also read the messages whole; fail if they differ
    bool                     render_history      = false;  // place the checkpoint by rendering the history
#else
    static constexpr UnsafeReuse                    unsafe_reuse        = UnsafeReuse::None;
    static constexpr bool                           fail_after_prefill  = false;
    static constexpr bool                           device_lost         = false;
    static constexpr bool                           sampler_chain       = false;
    static constexpr bool                           has_canned_output   = false;
    static constexpr std::string_view               canned_output       = {};
    static constexpr Corruption                     corrupt             = Corruption::None;
    static constexpr int64_t                        corrupt_at          = -1;
    static constexpr std::array<llama_token, 0>     forced              = {};
    static constexpr bool                           forced_only         = false;
    static constexpr int32_t                        probe               = 0;
    static constexpr int64_t                        leak_bytes          = 0;
    static constexpr bool                           check_tokens        = false;
    static constexpr bool                           prepare_only        = false;
    static constexpr bool                           tokens_ignore_edits = false;
    static constexpr bool                           check_messages      = false;
    static constexpr bool                           render_history      = false;
#endif
};

// What a running call carries for the hooks that act at evaluation (Engine::Call's base).
struct CallHooks {
#ifdef EL_TEST_HOOKS
    size_t pos_shift   = 0;      // its tokens' positions run late (the "shift" corruption)
    bool   device_lost = false;  // llama_decode reports a fatal backend error
#else
    static constexpr size_t pos_shift   = 0;
    static constexpr bool   device_lost = false;
#endif
};

#ifdef EL_TEST_HOOKS
// The "_test.messages_by_position" hook (the message cache's fault), looked up in the options
// before the messages are read.
bool messages_by_position(const json & opt);

// The check_messages hook: the messages as read (from the handle's cache, mostly) against a
// whole read of the caller's text; the call fails where they differ.
void check_cached_messages(const char * messages_text, const std::vector<common_chat_msg> & messages);
#else
inline bool messages_by_position(const json &) { return false; }
inline void check_cached_messages(const char *, const std::vector<common_chat_msg> &) {}
#endif

// The "_test" hooks of the options into `h`; returns the largest top_logprobs the call may ask
// for (the whole vocabulary under a hook, else 20).
int32_t read_test_hooks(const json & opt, const llama_vocab * vocab, TestHooks & h);

}  // namespace el
