// libFuzzer harness for the C ABI: random and mutated requests against one open handle.
//
//   EL_FUZZ_MODEL=model.gguf el_fuzz [libFuzzer flags] WORK_CORPUS tests/fuzz/corpus
//
// An input is a mode byte followed by up to three NUL-separated parts. Modes:
//   0  el_open(part0): config parsing (a config naming a real model is the fuzzer's luck)
//   1  el_generate(handle, part0, part1, part2)
//   2  el_generate with fixed valid messages, fuzzed tools and options
//   3  el_generate_stream(handle, part0, part1, part2) with a callback that may stop it
// Every result must be a JSON object (an answer or {"error"}), and every 50 inputs a normal
// call on the same handle must still answer: a crash, a hang (libFuzzer's -timeout), a
// sanitizer report or a failed check is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "el_shim.h"

namespace {

el_handle * g_handle = nullptr;
const char * HI = "[{\"role\": \"user\", \"content\": \"Say hi.\"}]";

void check_result(char * r, const char * what) {
    if (r == nullptr || r[0] != '{') {
        std::fprintf(stderr, "el_fuzz: %s returned %s\n", what, r == nullptr ? "NULL" : r);
        std::abort();
    }
    el_free(r);
}

int stop_after_two(const char *, void * user) { return ++*static_cast<int *>(user) >= 2; }

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    const char * model = std::getenv("EL_FUZZ_MODEL");
    if (model == nullptr) {
        std::fprintf(stderr, "el_fuzz: set EL_FUZZ_MODEL to a .gguf file\n");
        std::exit(2);
    }
    // A small context and token budget keep each input fast; options may still raise them.
    std::string config = std::string("{\"model\": \"") + model + "\", \"n_ctx\": 512, \"max_tokens\": 8, \"n_threads\": 1}";
    g_handle = el_open(config.c_str());
    if (g_handle == nullptr) {
        std::fprintf(stderr, "el_fuzz: %s\n", el_last_error());
        std::exit(2);
    }
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    static unsigned long n_inputs = 0;
    if (size == 0) {
        return 0;
    }
    std::vector<std::string> parts(1);
    for (size_t i = 1; i < size; i++) {
        if (data[i] == 0 && parts.size() < 3) {
            parts.emplace_back();
        } else {
            parts.back().push_back(static_cast<char>(data[i]));
        }
    }
    parts.resize(3);
    auto arg = [&](size_t i) { return i > 0 && parts[i].empty() ? nullptr : parts[i].c_str(); };

    switch (data[0] % 4) {
        case 0: {
            el_handle * h = el_open(parts[0].c_str());
            if (h != nullptr) {
                el_close(h);
            } else if (el_last_error()[0] != '{') {
                std::abort();
            }
            break;
        }
        case 1:
            check_result(el_generate(g_handle, arg(0), arg(1), arg(2)), "el_generate");
            break;
        case 2:
            check_result(el_generate(g_handle, HI, arg(1), arg(2)), "el_generate (fixed messages)");
            break;
        default: {
            int seen = 0;
            check_result(el_generate_stream(g_handle, arg(0), arg(1), arg(2), stop_after_two, &seen),
                         "el_generate_stream");
        }
    }
    if (++n_inputs % 50 == 0) {
        char * r = el_generate(g_handle, HI, nullptr, "{\"max_tokens\": 2}");
        if (r == nullptr || std::string(r).find("\"error\"") != std::string::npos) {
            std::fprintf(stderr, "el_fuzz: the handle no longer answers a normal call: %s\n", r ? r : "NULL");
            std::abort();
        }
        el_free(r);
    }
    return 0;
}
