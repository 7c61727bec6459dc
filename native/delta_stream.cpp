// delta_stream.cpp -- stop strings, UTF-8 holding and OpenAI-style deltas; see delta_stream.h.

#include "delta_stream.h"

#include "json_args.h"
#include "tool_recovery.h"

#include <algorithm>

namespace el {

StopScan scan_stops(const std::string & text, size_t from, const std::vector<std::string> & stops) {
    StopScan r;
    for (const auto & s : stops) {
        size_t at = text.find(s, from);
        if (at != std::string::npos) {
            r.found = std::min(r.found, at);
        }
        for (size_t k = std::min(s.size() - 1, text.size()); k > r.hold; k--) {
            if (text.compare(text.size() - k, k, s, 0, k) == 0) {
                r.hold = k;
                break;
            }
        }
    }
    return r;
}

size_t utf8_complete_prefix(const std::string & s) {
    size_t n = s.size();
    for (size_t back = 1; back <= 4 && back <= n; back++) {
        unsigned char c = (unsigned char) s[n - back];
        if ((c & 0xC0) == 0x80) {
            continue;  // continuation byte: keep looking for the lead byte
        }
        size_t need = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
        return back < need ? n - back : n;
    }
    return n;
}

bool DeltaStream::update(common_chat_msg msg, bool final) {
    if (cb_ == nullptr) {
        return true;
    }
    if (!final && hold_json_ && sent_.content.empty() && may_become_tool_call(msg.content)) {
        msg.content.clear();
    }
    assign_ids(msg);
    json delta = json::object();
    if (msg.reasoning_content.size() > sent_.reasoning_content.size() &&
        msg.reasoning_content.compare(0, sent_.reasoning_content.size(), sent_.reasoning_content) == 0) {
        delta["reasoning_content"] = msg.reasoning_content.substr(sent_.reasoning_content.size());
        sent_.reasoning_content    = msg.reasoning_content;
    }
    if (msg.content.size() > sent_.content.size() &&
        msg.content.compare(0, sent_.content.size(), sent_.content) == 0) {
        delta["content"] = msg.content.substr(sent_.content.size());
        sent_.content    = msg.content;
    }
    json calls = json::array();
    for (size_t i = 0; i < msg.tool_calls.size(); i++) {
        const auto & tc = msg.tool_calls[i];
        if (i >= sent_.tool_calls.size()) {
            // The name comes whole with the first delta of a call; the last call
            // of a partial parse may still be growing it, so wait for the end.
            if (tc.name.empty() || (!final && i + 1 == msg.tool_calls.size() && tc.arguments.empty())) {
                break;
            }
            sent_.tool_calls.push_back(common_chat_tool_call{tc.name, "", tc.id});
            calls.push_back(json{{"index", i}, {"id", tc.id}, {"type", "function"},
                                 {"function", json{{"name", tc.name}, {"arguments", ""}}}});
        }
        auto & s = sent_.tool_calls[i];
        if (tc.arguments.size() > s.arguments.size() && tc.arguments.compare(0, s.arguments.size(), s.arguments) == 0) {
            calls.push_back(json{{"index", i}, {"function", json{{"arguments", tc.arguments.substr(s.arguments.size())}}}});
            s.arguments = tc.arguments;
        }
    }
    if (!calls.empty()) {
        delta["tool_calls"] = calls;
    }
    if (delta.empty()) {
        return true;
    }
    if (logprobs_ != nullptr && logprobs_->size() > logprobs_sent_) {
        json fresh(logprobs_->begin() + (std::ptrdiff_t) logprobs_sent_, logprobs_->end());
        logprobs_sent_ = logprobs_->size();
        delta["logprobs"] = json{{"content", std::move(fresh)}};
    }
    return cb_(dump(with_prompt(std::move(delta))).c_str(), user_data_) == 0;
}

json DeltaStream::with_prompt(json delta) {
    if (!prompt_.is_null()) {
        delta["prompt"] = std::move(prompt_);
        prompt_ = nullptr;
    }
    return delta;
}

void DeltaStream::assign_ids(common_chat_msg & msg) {
    for (size_t i = 0; i < msg.tool_calls.size(); i++) {
        auto & tc = msg.tool_calls[i];
        if (!tc.id.empty()) {
            continue;
        }
        if (i >= ids_.size()) {
            ids_.push_back(new_id_());
        }
        tc.id = ids_[i];
    }
}

bool DeltaStream::progress(size_t processed, size_t total) {
    if (cb_ == nullptr) {
        return true;
    }
    const json delta = with_prompt(json{{"prompt_progress", {{"processed", processed}, {"total", total}}}});
    return cb_(dump(delta).c_str(), user_data_) == 0;
}

}  // namespace el
