// result.cpp -- from generated text to el_generate's result; see result.h.

#include "result.h"

#include "el_shim.h"
#include "tool_recovery.h"

namespace el {

namespace {

json tool_calls_json(const std::vector<common_chat_tool_call> & calls) {
    json arr = json::array();
    for (const auto & c : calls) {
        arr.push_back(json{{"id", c.id}, {"type", "function"}, {"function", json{{"name", c.name}, {"arguments", c.arguments}}}});
    }
    return arr;
}

}  // namespace

ParsedOutput parse_output(const std::string & text, const Request & req, bool at_limit,
                          const std::function<void(common_chat_msg &)> & assign_ids,
                          const std::function<std::string()> & new_id) {
    ParsedOutput out;
    common_chat_msg & msg = out.msg;
    bool cut_off = at_limit;  // its last call may be incomplete
    try {
        msg = common_chat_parse(text, false, req.parser);
    } catch (const std::exception &) {
        try {
            // Cut off inside a call or a reasoning block: what a stream would have shown,
            // so that the result agrees with the deltas already sent.
            msg = common_chat_parse(text, true, req.parser);
            cut_off = true;
        } catch (const std::exception &) {
            msg = common_chat_msg();
            msg.content = text;  // unparseable: return it as text rather than lose it
        }
    }
    assign_ids(msg);
    if (!cut_off) {
        // A call cut off by the limit is returned as written, as the stream showed it
        // (finish_reason "length" says it is incomplete), not judged against its schema.
        check_tool_calls(msg.tool_calls, req.tool_params, out.invalid);
    }
    std::vector<common_chat_tool_call> recovered;
    if (req.recover && msg.tool_calls.empty() && out.invalid.empty() &&
        recover_tool_calls(msg.content, req.tool_params, recovered, out.invalid) && !recovered.empty()) {
        // Only valid calls replace the text: when every call was invalid, a caller that
        // ignores invalid_tool_calls still sees what the model wrote.
        msg.tool_calls = std::move(recovered);
        msg.content.clear();
    }
    for (auto & tc : msg.tool_calls) {
        if (tc.id.empty()) {
            tc.id = new_id();
        }
    }
    for (auto & bad : out.invalid) {
        if (bad.id.empty()) {
            bad.id = new_id();
        }
    }
    return out;
}

json result_json(const ParsedOutput & parsed, const CallReport & r, bool with_logprobs) {
    const common_chat_msg & msg = parsed.msg;
    json tool_calls = tool_calls_json(msg.tool_calls);
    json invalid = json::array();
    for (const auto & c : parsed.invalid) {
        invalid.push_back(json{{"id", c.id}, {"type", "function"}, {"function", json{{"name", c.name}, {"arguments", c.arguments}}},
                               {"error", c.error}});
    }
    json content = msg.content.empty() && !msg.tool_calls.empty() ? json(nullptr) : json(msg.content);
    json reasoning = msg.reasoning_content.empty() ? json(nullptr) : json(msg.reasoning_content);
    json message = {{"role", "assistant"}, {"content", content}};
    if (!msg.tool_calls.empty()) {
        message["tool_calls"] = tool_calls;
    }
    if (!reasoning.is_null()) {
        message["reasoning_content"] = reasoning;
    }
    json out = {
        {"message", message},
        {"content", content},
        {"reasoning_content", reasoning},
        {"tool_calls", tool_calls},
        {"invalid_tool_calls", invalid},
        {"finish_reason", r.finish_reason},
        {"truncated", r.truncated},
        {"usage", {{"prompt_tokens", r.n_prompt}, {"completion_tokens", r.n_decoded}, {"total_tokens", r.n_prompt + r.n_decoded}}},
        {"n_prompt", r.n_prompt},
        {"n_reused", r.n_reused},
        {"n_decoded", r.n_decoded},
        {"ms_prepare", r.ms_prepare},
        {"ms_template", r.ms_template},
        {"ms_tokenize", r.ms_tokenize},
        {"ms_sampler", r.ms_sampler},
        {"n_tokenize_reused", r.n_tokenize_reused},
        {"n_render_reused", r.n_render_reused},
        {"n_messages_reused", r.n_messages_reused},
        {"ms_reset", r.ms_reset},
        {"ms_prefill", r.ms_prefill},
        {"ms_decode", r.ms_decode},
        {"slot", r.routed ? json(r.slot) : json(nullptr)},
        {"restored_from_host", r.restored_from_host},
        {"shared_prefix", r.shared_prefix},
        {"restored_from_disk", r.restored_from_disk},
        {"n_batched_max", r.n_batched_max},
        {"n_argmax", r.n_argmax},
        {"n_drafted", r.n_drafted},
        {"n_accepted", r.n_accepted},
        {"abi_version", EL_ABI_VERSION},
    };
    if (!r.warnings.empty()) {
        out["warnings"] = r.warnings;
    }
    if (with_logprobs) {
        out["logprobs"] = json{{"content", r.logprobs}};
        if (!r.logprobs_end.is_null()) {
            out["logprobs"]["end"] = r.logprobs_end;
        }
    }
#ifdef EL_TEST_HOOKS
    if (!r.probe.is_null()) {
        out["_test_probe"] = r.probe;
    }
#endif
    return out;
}

}  // namespace el
