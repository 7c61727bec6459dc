// test_hooks.cpp -- reading the "_test" option; see test_hooks.h.

#include "test_hooks.h"

#include "messages.h"

#include <climits>

namespace el {

#ifdef EL_TEST_HOOKS
namespace {

// "_test": {"corrupt": {"kind": "stale" | "missing" | "duplicate" | "other" | "shift", "at": i}}
void read_corruption(const json & t, TestHooks & r) {
    const json * c = find(t, "corrupt");
    if (c == nullptr) {
        return;
    }
    if (!c->is_object()) {
        fail("\"_test.corrupt\" must be an object");
    }
    reject_unknown_keys(*c, {"kind", "at"}, "_test.corrupt");
    const std::string kind = get_string(*c, "kind", "");
    r.corrupt = kind == "stale"       ? Corruption::Stale
              : kind == "missing"     ? Corruption::Missing
              : kind == "duplicate"   ? Corruption::Duplicate
              : kind == "other"       ? Corruption::Other
              : kind == "shift"       ? Corruption::Shift
                                      : Corruption::None;
    if (r.corrupt == Corruption::None) {
        fail("\"_test.corrupt.kind\" must be stale, missing, duplicate, other or shift");
    }
    r.corrupt_at = get_int(*c, "at", -1, INT32_MIN, INT32_MAX);
}

// "_test": {"force": [token ids]}: decode exactly these tokens (logprobs still report
// the model's distribution at each), so two handles can be compared position by position.
void read_forced_tokens(const json & t, const llama_vocab * vocab, TestHooks & r) {
    const json * f = find(t, "force");
    if (f == nullptr) {
        return;
    }
    if (!f->is_array() || f->empty()) {
        fail("\"_test.force\" must be a non-empty array of token ids");
    }
    for (const json & id : *f) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= llama_vocab_n_tokens(vocab)) {
            fail("\"_test.force\" holds a value that is not a token id of this model");
        }
        r.forced.push_back(id.get<llama_token>());
    }
}

}  // namespace

bool messages_by_position(const json & opt) {
    const json * t = opt.is_object() ? find(opt, "_test") : nullptr;
    const json * v = t != nullptr && t->is_object() ? find(*t, "messages_by_position") : nullptr;
    return v != nullptr && v->is_boolean() && v->get<bool>();
}

void check_cached_messages(const char * messages_text, const std::vector<common_chat_msg> & messages) {
    const std::vector<common_chat_msg> whole = read_messages_whole(messages_text);
    if (const size_t at = first_difference(whole, messages); at != SIZE_MAX) {
        fail("test hook check_messages: the cached reading of the messages differs from a whole one at message " +
             std::to_string(at) + " of " + std::to_string(whole.size()));
    }
}
#endif

int32_t read_test_hooks(const json & opt, const llama_vocab * vocab, TestHooks & r) {
    int32_t max_top_logprobs = 20;
    if (const json * t = find(opt, "_test")) {
#ifdef EL_TEST_HOOKS
        if (!t->is_object()) {
            fail("\"_test\" must be an object");
        }
        reject_unknown_keys(*t, {"top_logprobs", "reuse", "fail_after_prefill", "output", "force_output", "device_lost",
                                 "sampler_chain", "corrupt", "force", "leak_bytes", "probe", "check_tokens",
                                 "tokens_ignore_edits", "check_messages", "messages_by_position", "prepare_only",
                                 "render_history"},
                            "_test");
        r.device_lost = get_bool(*t, "device_lost", false);
        if (find(*t, "output") != nullptr) {
            r.canned_output = get_string(*t, "output", "");
            r.has_canned_output = true;
        }
        if (find(*t, "force_output") != nullptr) {
            // The whole output, decoded token by token as if sampled: streaming, stop
            // strings and limits apply, and it ends as if the model ended it.
            r.forced      = common_tokenize(vocab, get_string(*t, "force_output", ""), false, true);
            r.forced_only = true;
        }
        max_top_logprobs = llama_vocab_n_tokens(vocab);
        const std::string reuse = get_string(*t, "reuse", "checked");
        r.unsafe_reuse = reuse == "trust_seq_rm" ? UnsafeReuse::TrustSeqRm
                       : reuse == "corrupt"      ? UnsafeReuse::Corrupt
                                                 : UnsafeReuse::None;
        r.fail_after_prefill = get_bool(*t, "fail_after_prefill", false);
        r.sampler_chain      = get_bool(*t, "sampler_chain", false);
        read_corruption(*t, r);
        read_forced_tokens(*t, vocab, r);
        r.leak_bytes = get_int(*t, "leak_bytes", 0, 0, 1 << 20);
        r.probe      = (int32_t) get_int(*t, "probe", 0, 0, INT32_MAX);
        r.check_tokens        = get_bool(*t, "check_tokens", false);
        r.tokens_ignore_edits = get_bool(*t, "tokens_ignore_edits", false);
        r.check_messages      = get_bool(*t, "check_messages", false);
        get_bool(*t, "messages_by_position", false);  // read before the messages (read_inputs)
        r.prepare_only        = get_bool(*t, "prepare_only", false);
        r.render_history      = get_bool(*t, "render_history", false);
#else
        (void) t;
        (void) vocab;
        (void) r;
        fail("\"_test\" hooks are not compiled into this library");
#endif
    }
    return max_top_logprobs;
}

}  // namespace el
