// patched.h: every use the shim makes of what a patch to llama.cpp adds (native/patches/),
// and what stands in for it when the tree was built without that patch.
//
// Invariant: the shim builds and answers correctly against a llama.cpp tree carrying any
// subset of the patches. scripts/fetch_llama.py applies each patch that applies and CMake
// defines EL_PATCH_<NAME> for each that did; this file (and only it) reads those defines. A
// missing patch costs speed (a render from scratch, a grammar parsed per call, the parser
// saved and loaded back), or refuses the one feature it makes safe
// ("rpc" without ggml-rpc-no-abort; "deterministic" on the weight types llamafile's sgemm
// takes without ggml-cpu-use-ref-no-sgemm), never a wrong answer. docs/patches.md lists them.
#pragma once

#include "chat.h"
#include "sampling.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

// Declared by the patches that define them (common/chat.h, common/sampling.h); declared here
// too so that the handle can hold an (always null) pointer to them without those patches.
struct common_chat_msg_values;
struct common_grammar_cache;
struct llama_model;

namespace el::patched {

// el_build_info's JSON (el_shim.h): the patches this build applied and lacked, made once.
const char * build_info();

// ---- common/chat rendering ---------------------------------------------------------------
// common-shared-message-values: a store of message values kept between renders (null: none).
std::shared_ptr<common_chat_msg_values> message_values_init();
// Point a render at the store (the scope keeps sessions from taking each other's values).
void share_message_values(common_chat_templates_inputs & in, const std::shared_ptr<common_chat_msg_values> & values,
                          const std::string & scope);
// A render that failed with shared values is done again without them.
bool shares_message_values(const common_chat_templates_inputs & in);
void stop_sharing_message_values(common_chat_templates_inputs & in);
// common-shared-values-message-ids: messages taken from the store by number.
void set_message_ids(common_chat_templates_inputs & in, const std::vector<uint64_t> & ids);
void drop_last_message_id(common_chat_templates_inputs & in);
// common-render-faster: render the prompt only, no parser (a history rendered again).
void prompt_only(common_chat_templates_inputs & in);
// common-return-parser-object: the output parser handed over as the object it is.
void want_parser_object(common_chat_templates_inputs & in);
bool take_parser_object(common_chat_params & chat, common_chat_parser_params & parser);
// common-shared-values-last-message: what the render's loops output for the last message.
void        watch_last_message();
std::string watched_last_message();  // taken, and the watch cleared ("" without the patch)
// common-render-memo-loops: loop iterations taken from the memo by renders on this thread.
uint64_t render_memo_hits();

// ---- sampling ----------------------------------------------------------------------------
// common-sampling-grammar-cache: parsed grammars kept and cloned (null without the patch).
common_grammar_cache * grammar_cache_init();
void                   grammar_cache_free(common_grammar_cache * cache);
void                   use_grammar_cache(common_params_sampling & s, common_grammar_cache * cache);

// ---- ggml ----------------------------------------------------------------------------------
// ggml-rpc-no-abort: without it a failed round trip aborts the process, so "rpc" is refused.
void     rpc_require(const std::string & endpoint);  // throws the refusal
void     rpc_set_timeouts(int connect_ms, int io_ms);
bool     rpc_check(const char * endpoint);
uint64_t rpc_failures(const char * endpoint);
void     rpc_interrupt(const char * endpoint);
// ggml-cpu-use-ref-no-sgemm: without it, reference mode still sends batches of two or more
// rows of these weight types through llamafile's sgemm, so "deterministic" is refused for a
// model that has one. Returns the offending type's name, or "" when there is none.
std::string deterministic_refusal(const llama_model * model);

}  // namespace el::patched
