/*
** el_shim.h -- the whole public contract of libel_shim.
**
** libel_shim runs local GGUF models through a pinned llama.cpp and speaks JSON
** at its boundary: OpenAI-style "messages" and "tools" go in, an assistant
** message with content, reasoning, tool calls, a finish reason and timings
** comes out. No llama.cpp type crosses this boundary, so any language that can
** call C functions and pass strings can use it (Python, Ruby and C are tested).
**
** STRINGS. Every string passed in is NUL-terminated UTF-8 and is only read
** during the call; the caller keeps ownership. Every string returned by
** el_generate, el_generate_stream and el_stats is allocated by the library
** and must be released with el_free(); it is never NULL. Strings returned by
** el_version and el_last_error are owned by the library (see each function).
**
** ERRORS. A call that fails returns a JSON object {"error": "<message>",
** "code": <el_code>} (el_open returns NULL and an int-returning call -1, and
** then el_last_error() holds that object). The code says which class of
** failure it is and never changes meaning (see el_code below); the message is
** the detail, for people, and may be reworded. Malformed JSON, wrong types,
** unknown roles, prompts longer than the context, bad sampling values, NULL or
** closed handles: all are reported this way. No C++ exception and no abort escapes
** the library for any input. JSON nested deeper than 512 levels of arrays and
** objects (in messages, tools, options, the config, or the JSON text of a
** tool call's "arguments") is refused with an error naming where, before it
** is parsed. A call refused before it was given a slot (bad input, a prompt
** longer than the context, a template that fails) leaves the handle as it
** found it: its messages and prompt are not kept for reuse and push no one
** else's out of the message and token caches, so the next call computes and
** reports what it would have without it; only the chat template's own memo and
** values may keep what its render made, as cache pressure (n_render_reused and
** timing, see SESSIONS AND ISOLATION). A call that fails after it was given a slot clears that
** slot (see A FAILED CALL); the messages and prompt it brought stay in the
** request caches, which change only speed and the *_reused counters.
**
** THREADS. Handles are independent: different handles may be used from
** different threads at the same time, and their generations proceed together.
** Their evaluations (each prompt chunk and decode step) take turns on one
** thread the library keeps per process, so that ggml's OpenMP threads form one
** team (docs/abi-rationale.md says why): a prompt chunk of one handle delays the others' next evaluation by its own
** length (at most n_batch tokens). To compute two models truly at once, on a
** machine with cores for both, open them in separate processes.
** Calls on ONE handle run concurrently up to its number of slots (config
** n_seq): with n_seq 1 (the default) they are serialized, and a second thread
** calling el_generate on a busy handle waits for the first call to finish.
** With n_seq >= 2, up to n_seq calls run at once, each in its own slot (routed
** as SLOTS says). A call waits for a turn only while it cannot start: every
** slot serves a call, or the one slot its session is pinned to does; of the
** calls that wait, the oldest one that could start goes first, so a call that
** waits for its own session's slot never delays another session's call. Every
** wait is bounded by the call's own timeout_ms and by el_cancel.
** The running calls' decode steps are evaluated together: one
** batch holds the next token of every decoding call (continuous batching),
** and the prompt of a call that joins is evaluated in n_batch chunks between
** those steps. Every evaluation of a handle (n_seq 1 too) is ordered by one
** thread the handle owns and computed on the process's evaluating thread, so
** the calling threads may differ from call to call at no cost; all else a call
** does (reading its JSON, rendering and tokenizing its prompt, turning tokens
** into text, its stream callbacks) runs on the thread that called it.
** WHAT ONE CALL MAY DO TO ANOTHER on the same handle, and no more:
**   - its prompt chunks (at most n_batch tokens each) and its token in each
**     decode step cost the others the time they take to compute;
**   - its preparation (reading, rendering, tokenizing its request) never holds
**     the handle: running calls' steps go on meanwhile. Preparations take turns
**     with each other (they share the request caches), so a huge request delays
**     the start of a call that arrives behind it by its own preparation time;
**     one whose prompt cannot fit the context is refused before tokenizing;
**   - its stream callbacks, progress deltas included, run without the handle's
**     lock: a callback that blocks holds up its own call alone, except that the
**     next decode step waits up to 10 ms once for its token; a call that missed
**     a step is not waited for again until it submits its next token;
**   - a call that starts from another conversation's prefix (SHARING WITHIN A
**     SCOPE) or from the disk tier (config cache_dir) copies that state while
**     holding the handle: the others' next decode step waits for the copy,
**     about the time to read its bytes (tens of MB on the catalogue models);
**   - as it ends, it frees its slot for the calls that wait;
**   - what it leaves in the caches can change the others' n_reused, restored_from_host
**     and *_reused counters and timings (see SESSIONS AND ISOLATION), never
**     what they compute.
** A handle does not survive fork(): a child that inherited one gets the error
** "...opened by the parent process before fork()..." from every call on it,
** el_close releases it at once without freeing anything (its threads exist only
** in the parent), and the child exits without waiting for it; a child may open
** handles of its own. A fork() from inside a stream callback is the exception:
** the child is then inside a call whose threads it lacks, and must exec or
** _exit without returning from the callback. Concurrent calls compute what
** they would compute alone, up to the rounding of the other batch shape (see
** CACHE; bit for bit with "deterministic"). Errors stay per call: a failed
** call clears only its own slot; a fatal backend error fails every call in
** flight and the handle is dead. el_cancel stops every call in flight on the
** handle, and those waiting for a turn; to stop one call alone, return
** non-zero from its stream callback or give it a timeout_ms. el_cancel never
** waits and never frees anything. el_close may be called from any thread,
** also while other threads generate on or wait for the handle: running calls
** return finish_reason "cancelled", calls that had not yet taken the handle
** return "invalid or closed handle", and el_close returns only after all of
** them let go of the handle, freeing it on the closing thread. Any later
** use of a closed handle, el_close included, returns the error "invalid or
** closed handle"; it is never undefined behaviour, because handles are opaque
** tokens that the library looks up, never dereferences.
**
** CACHE. Each handle keeps the tokens of its last prompts resident in the
** model's KV cache, and each generate evaluates only the part of the new prompt
** that the cache does not already hold (result field "n_reused"). Reuse is
** exact on dense, sliding-window, recurrent and hybrid models: where the cache
** cannot be trimmed to the shared prefix, a saved checkpoint is restored or the
** prompt is evaluated afresh. It never changes what the model computes beyond
** floating-point rounding: llama.cpp's kernels round differently for different
** batch shapes, so by default logits after a reused prefix may differ from a
** fresh evaluation in the last bits, and greedy decoding may take the other
** branch of a near-tie. With "deterministic" (see DETERMINISM) they are equal
** bit for bit.
**
** DETERMINISM. With config "deterministic": true the logits at the end of any
** prompt are bit-identical whether it was evaluated fresh in one batch or in
** many, reused from the cache in any split, restored from a checkpoint or from
** host memory, or evaluated in a slot beside other conversations; so greedy
** output depends only on the messages, never on what the handle ran before.
** It puts the CPU on ggml's reference kernels (one per-row dot product for
** every matrix multiply, flash attention one query at a time), turns flash
** attention on, keeps full-size sliding-window caches and does not repack
** weights: prefill is slower and sliding-window models use more memory (see
** docs/determinism.md for the measured cost and why each part is needed). It
** is refused with "rpc", "n_gpu_layers", "flash_attn": "off" and "swa_full":
** false, where it could not be kept. Handles compare equal across processes on
** the same build and CPU; a different CPU or build may round differently.
**
** SESSIONS AND ISOLATION. Cached state belongs to the session that wrote it
** (option "session"; calls that name none share one pool, the session ""),
** within its trust SCOPE (option "scope", default the config's "scope"; since
** 1.11). A call never reuses, trims or restores another session's state, so
** neither its output nor what it reuses ever comes from another session's
** prompts: a slot pinned to a session serves only that session, calls without
** a session are routed by prefix among their pool's slots only, and a slot
** taken from another owner (when every slot is busy) has its conversation
** saved to host memory under that owner and its cache cleared first. Calls
** without a session may reuse each other's prefixes: that pool is shared.
** The one relaxation is SHARING WITHIN A SCOPE: a call in a named scope whose
** prompt starts with a prefix that another conversation of the SAME scope holds
** (in a slot no call runs on, or in host memory), at least 16 tokens longer than
** what its own slot holds, starts from a copy of that state in its own slot
** (result "shared_prefix": true) instead of evaluating the prefix again. The
** source is only read: a call never trims, evicts or overwrites another
** session's slot or host entry to get a prefix. So within a scope a call's
** n_reused and timings may reflect the other sessions' prompts; across scopes
** nothing is shared, and they never do. Calls that name no scope on a handle
** opened without one are in no scope, and share with no other session (as in
** 1.10). Callers that must not see each other (the tenants of a server) each
** get a scope of their own; sessions of one tenant may share a scope.
** Cache PRESSURE is shared, content is not. The slots, the state_cache_mib
** host-memory budget, the request caches (the last 8 prompts' tokens, 8 MiB of
** read messages, 4 MiB of template values) and the chat template's loop memo
** (process-wide, keyed by what an iteration reads) are bounded, and every
** session's calls fill them. So another session's traffic can change how much
** of a session's own earlier state is still there: its n_reused and
** restored_from_host (its conversation may have been evicted from its slot or
** pushed out of host memory), its n_tokenize_reused, n_messages_reused and
** n_render_reused, and its timings. It never changes what the call computes:
** content, tool calls, finish reason and logprobs are those of a fresh handle,
** up to the rounding of the batch shape (bit for bit with "deterministic").
**
** DEVICE LOSS. When the backend fails fatally (llama_decode reports a
** compute failure, as when a GPU is lost), the call returns an error and the
** handle goes dead: every later call on it returns that error, el_reset
** returns -1, and el_close frees only host memory, leaving the context and
** model unfreed rather than calling into a failed device.
**
** REMOTE DEVICES. With "rpc" (see el_open) the model's layers are split over
** llama.cpp rpc-server processes on other machines (or this one) and the local
** CPU/GPU, as llama-server's --rpc does; results are the same as local-only up
** to floating-point rounding. SECURITY: rpc-server has no authentication and
** no encryption: anyone who can reach its port can run computations and read
** or write its memory. Run it only on a trusted network, bound to an address
** of that network (never 0.0.0.0 on a machine with a public interface).
** A server that dies, or stalls past rpc_timeout_ms, or does not answer 2 s
** after every call whose tokens the stalled evaluation holds reached its
** timeout_ms or was cancelled (one call's timeout never cuts an evaluation
** that another call in it still waits for: that one waits for rpc_timeout_ms),
** fails those calls with an error
** naming it and the handle goes dead as on DEVICE LOSS (el_close then frees
** everything, since a lost server leaves nothing local in doubt); the
** process is never aborted. A new handle works once the server is back.
** Connections are per process and per endpoint: handles naming the same
** server share one connection, and one failure kills all of them.
**
** VERSIONING. EL_ABI_VERSION (also el_version() and "abi_version" in every
** result) is MAJOR.MINOR. MINOR grows when functions, config keys, options or
** result fields are added; existing ones keep their meaning. MAJOR grows when
** anything is removed or changes meaning, and then the soname changes too.
*/
#ifndef EL_SHIM_H
#define EL_SHIM_H

#ifdef __cplusplus
extern "C" {
#endif

#define EL_ABI_VERSION_MAJOR 1
#define EL_ABI_VERSION_MINOR 14
#define EL_ABI_VERSION "1.14"

#if defined(_WIN32)
#define EL_API __declspec(dllexport)
#else
#define EL_API __attribute__((visibility("default")))
#endif

/* An open model: opaque; never dereference it. */
/*
** el_code: the class of a failure, as "code" in every error object (since
** 1.13). Values are stable: a code is never renumbered or given a new
** meaning, and new ones may be added (treat an unknown one as EL_E_INTERNAL).
*/
typedef enum el_code {
    EL_OK = 0,
    EL_E_INTERNAL = 1,     /* a failure inside the library or llama.cpp that the
                              input did not cause (a bug, or a decode that failed) */
    EL_E_INVALID = 2,      /* the input is malformed or out of range: JSON, types,
                              values, sizes, a schema or template that cannot apply */
    EL_E_UNKNOWN_KEY = 3,  /* a key the config, options or one of their objects
                              does not have (the message suggests the nearest) */
    EL_E_NOT_FOUND = 4,    /* el_open: the model file is missing or unreadable */
    EL_E_LOAD = 5,         /* el_open: not a model llama.cpp can load, or no
                              context of this size could be created */
    EL_E_CONTEXT_FULL = 6, /* the prompt (or prompt and reply) does not fit the
                              context: raise n_ctx or shorten the conversation */
    EL_E_CLOSED = 7,       /* NULL, invalid or closed handle, or one inherited
                              through fork() */
    EL_E_DEVICE = 8,       /* the backend failed, or a remote device was lost or
                              cannot be reached: the handle is dead (close it) */
    EL_E_TIMEOUT = 9,      /* the call's timeout_ms passed (el_embed; el_generate
                              reports finish_reason "timeout" instead) */
    EL_E_CANCELLED = 10,   /* el_cancel or el_cancel_request stopped it (el_embed;
                              el_generate reports finish_reason "cancelled") */
    EL_E_NO_MEMORY = 11    /* an allocation failed */
} el_code;

typedef struct el_handle el_handle;

/*
** el_version: the ABI version string, e.g. "1.4", followed by the llama.cpp
** commit it was built from: "1.4 (llama.cpp 0c1e570)". Static storage; never
** free it. Thread-safe.
*/
EL_API const char *el_version(void);

/*
** el_build_info (1.8): what this library was built from, as a JSON object:
** {"abi_version", "llama_cpp" (the commit, or what is known of the tree),
**  "patches": names of native/patches/ the tree carried, "patches_missing": those it
**  lacked, "losses": per missing patch that changes behaviour rather than speed, what is
**  refused without it}. Every patch is optional: without one, the library falls back to
** upstream llama.cpp (slower; "rpc" refused without ggml-rpc-no-abort, "deterministic"
** refused for some weight types without ggml-cpu-use-ref-no-sgemm). Static storage; never
** free it. Thread-safe.
*/
EL_API const char *el_build_info(void);

/*
** el_open: load a model, its chat templates and a context, and keep them
** resident until el_close.
**
** config_json is an object. Keys (all optional but "model"):
**   model          path to a .gguf file                               (string)
**   n_ctx          context length in tokens, per slot; 0 = the model's
**                  own (its training context), per slot         (4096)
**   n_batch        prompt tokens evaluated per llama_decode           (512)
**   n_threads      CPU threads; default: physical cores for math
**   n_gpu_layers   layers offloaded to GPU and remote devices; -1 = all.
**                  The last layers are offloaded first; the rest run on the
**                  CPU. A GPU needs a library built with one (CMake
**                  -DGGML_CUDA=ON, see README)      (0; -1 when "rpc" is set)
**   rpc            ["host:port", ...]: llama.cpp rpc-server endpoints whose
**                  devices join the model (see REMOTE DEVICES). Each is
**                  probed with a round trip at open; one that cannot be
**                  reached fails el_open with an error naming it. Remote
**                  devices come first in the device order, then local GPUs.
**   rpc_timeout_ms socket timeout for connecting (at most 10 s of it) and
**                  for each round trip to a server; a server silent for
**                  longer is lost. Process-wide: applies to connections
**                  opened from this el_open on. Must exceed the slowest
**                  remote evaluation of one n_batch           (60000)
**   tensor_split   [share, ...]: how the offloaded layers are divided over
**                  the devices, in device order (remote in "rpc" order, then
**                  local GPUs), e.g. [1, 3]; default: in proportion to each
**                  device's free memory
**   seed           default sampling seed                     (random)
**   temperature, top_p, top_k, min_p
**                  default sampling; temperature <= 0 means greedy
**                  (0.8, 0.95, 40, 0.05, as llama.cpp)
**   max_tokens     default generation limit                          (512)
**   swa_full       sliding-window models keep a full-size cache     (false)
**   deterministic  logits independent of batch shape and cache history,
**                  bit for bit (see DETERMINISM); implies flash_attn "on"
**                  and swa_full true                               (false)
**   flash_attn     "auto" | "on" | "off": flash attention, as llama.cpp's
**                  flash_attn_type; which is faster depends on the model
**                  and the context length                          ("auto")
**   n_checkpoints  saved cache states per conversation, used to reuse the
**                  prompt prefix where the cache cannot be trimmed      (8)
**   n_seq          conversations kept warm at once ("slots"), each with its
**                  own n_ctx tokens of cache (memory grows with it); also
**                  how many calls run at once (see THREADS)              (1)
**   state_cache_mib  host memory for conversations evicted from their slot;
**                  one that comes back is restored, not re-evaluated  (256)
**   chat_template  a Jinja template overriding the model's own. A model
**                  with none of its own and no chat_template renders with
**                  llama.cpp's ChatML fallback, and its replies also end
**                  at "<|im_end|>" and "<|im_start|>" written as text (a
**                  model that never learnt ChatML writes them out; not
**                  with ignore_eos; 1.13)
**   tool_call_recovery  turn a tool call written as bare or fenced JSON in
**                  the content into tool_calls (see el_generate)     (true)
**   log            let llama.cpp print its log to stderr            (false)
**   embd_ctx       tokens one el_embed input may have: the size of the
**                  embedding context (1.10), capped at the model's own   (512)
**   speculative    each call's default "speculative" (see el_generate)("off")
**   embd_pooling   "auto" | "mean" | "cls" | "last": how el_embed pools
**                  hidden states; "auto" is the model's own (an embedding
**                  model's GGUF names it), else "mean" (1.10)        ("auto")
**   cache_dir      a directory for the DISK TIER ("": none): what the slots
**                  hold when the handle closes, and host-memory entries the
**                  state_cache_mib budget pushes out, are written there; a
**                  call whose prompt a file holds a longer prefix of than
**                  the slots and host memory do starts from it (result
**                  "restored_from_disk"), in this process or another. An
**                  entry is used only by a handle of the same model content
**                  (the file's SHA-256, computed at the first open and kept
**                  in ".NAME.el-sha256" beside it, else under cache_dir;
**                  believed only while the file's inode, size, mtime and
**                  ctime are unchanged; 1.12) and the same settings
**                  that shape the state (n_ctx, n_ubatch, swa_full, flash
**                  attention in use, deterministic, devices, build), for an
**                  owner that could read it in memory (its own session, or
**                  the same named scope), and only if what it loads checks
**                  out (magic, sizes, the header's CRC-32 and that of each
**                  part it reads: the state and the one checkpoint the call
**                  starts from); any other file is ignored.
**                  Files are written whole (temporary name, then rename), so
**                  processes may share the directory; files are readable by
**                  whoever can read the directory. Directories the tier
**                  creates are mode 0700; an existing one keeps its mode
**                  (1.12). A write that fails (full disk, RLIMIT_FSIZE:
**                  SIGXFSZ is blocked on the writing thread and consumed)
**                  leaves no file and no signal behind. el_reset,
**                  el_forget and el_forget_scope remove the entries they
**                  name from the directory too (1.12) (1.11)
**   disk_cache_mib bound on cache_dir's entries, least recently used go
**                  first (1.11)                                    (1024)
**   scope          the trust scope of calls that name none (a string of
**                  at most 256 bytes, "" allowed): its sessions start from
**                  each other's prefixes (SESSIONS AND ISOLATION; 1.11).
**                  Absent: such calls are in no scope, sessions share
**                  nothing                                         (absent)
**
** Returns a handle, or NULL on failure; then el_last_error() says why (file
** missing, not a GGUF file, bad JSON, unknown key, out of memory, an RPC
** server that cannot be reached, ...).
** Thread-safe.
*/
EL_API el_handle *el_open(const char *config_json);

/*
** el_last_error: why the last el_open or int-returning call (el_cancel,
** el_cancel_request, el_reset, el_forget, el_forget_scope, el_close) on the
** calling thread failed, as {"error": "...", "code": <el_code>}; "{}" when
** it succeeded (each of those calls sets it; el_generate, el_embed and
** el_stats, whose errors are in what they return, leave it alone). The
** string is owned by the library and valid until the next of those calls on
** this thread.
*/
EL_API const char *el_last_error(void);

/*
** el_generate: one assistant turn.
**
**   messages_json  array of OpenAI chat messages: {"role": "system" | "user" |
**                  "assistant" | "tool", "content": string or [{"type":
**                  "text", "text": ...}], "tool_calls": [...] (assistant),
**                  "tool_call_id": ... (tool)}
**                  A final assistant message is continued rather than
**                  answered; the result's content is then the whole message,
**                  its given beginning included.
**   tools_json     NULL, or an array of OpenAI tools {"type": "function",
**                  "function": {"name", "description", "parameters"}}
**   options_json   NULL, or an object; every key optional:
**     max_tokens, temperature, top_p, top_k, min_p, seed
**                          override the handle's defaults for this call
**     stop                 string or array of up to 16 strings (each at most
**                          1024 bytes) ending the generation
**     tool_choice          "auto" | "none" | "required" |
**                          {"type": "function", "function": {"name": N}}
**     parallel_tool_calls  allow several calls in one turn        (true)
**     response_format      {"type": "text" | "json_object"} or
**                          {"type": "json_schema", "json_schema": {"schema"}}.
**                          Beside tools with tool_choice "auto" (1.9; refused
**                          before), the output is a call (in the template's
**                          syntax, or as {"name", "arguments"} JSON), returned
**                          as tool_calls, or an answer that matches the
**                          schema. The model's first choice decides: when the
**                          token it would write unconstrained cannot open a
**                          call (not a control token, whitespace, or text
**                          starting with { [ ` <), the answer is constrained
**                          to the schema alone. A JSON answer that is also a
**                          valid call object is read as the call.
**                          Every keyword of the schema is enforced by the
**                          grammar or the call fails before it starts, with
**                          an error naming the schema path (1.12): patterns
**                          must be anchored (^...$) and in the supported
**                          regex subset (\d \w \s and escaped punctuation
**                          are rewritten to classes; lookarounds, \p, \b,
**                          lazy quantifiers are refused); formats other than
**                          date, time, date-time and uuid, bounds on
**                          non-integers, pattern beside min/maxLength, and
**                          not/if/uniqueItems/multipleOf/patternProperties
**                          and the like are refused. So is what would make
**                          each token's choice costly: a regex repeating a
**                          part that can match nothing ((a?){200}), counts
**                          past 2000, more than 1024 values in an enum or
**                          2048 in a schema. A tool's parameters are held to
**                          the cost limits only (native/grammar_limits.h)
**     grammar_tools        an array of tools, each one of tools_json by name,
**                          usually with narrower parameter schemas (an enum
**                          of the values a slot may take): the tool-call
**                          grammar (the template's, the bare-JSON one, a
**                          forced call's) is built from these, while the
**                          prompt still shows tools_json, so the model's view
**                          and the cached prefix do not change (1.14). A
**                          call may then name only these tools, with
**                          arguments their schemas accept; what the model
**                          writes as text outside the grammar (recovered or
**                          not) is still checked against tools_json. A
**                          named tool_choice must name one of them; with
**                          tool_choice "none" they are ignored
**     repeat_penalty, frequency_penalty, presence_penalty, repeat_last_n
**                          llama.cpp's penalties sampler over the tokens this
**                          call generated (1.12): repeat_penalty (0..10, 1:
**                          off), OpenAI's frequency_penalty and
**                          presence_penalty (-2..2, 0: off), the last
**                          repeat_last_n tokens (64; -1: the whole context)
**     logprobs, top_logprobs
**                          return per-token log probabilities (up to 20
**                          alternatives each)
**     logit_bias           {"<token id>": bias, ...}
**     ignore_eos           never sample an end-of-generation token, so the
**                          call runs to max_tokens (for benchmarks)
**     tool_call_recovery   override the handle's setting
**     timeout_ms           wall-clock limit for this call; on expiry the call
**                          returns with finish_reason "cancelled" (with
**                          "rpc": an error if a server still has not
**                          answered 2 s later; see REMOTE DEVICES)
**     session              pin this conversation to a slot (any string); see
**                          SESSIONS AND ISOLATION. Without it, the unpinned
**                          slot whose cache shares the longest prefix with the
**                          prompt (at least half of what that slot holds)
**                          serves the call. Else (and for a session without a
**                          slot) an empty slot, else the least recently used
**                          unpinned one, else the least recently used pinned
**                          one (result field "slot")
**     scope                the trust scope (a string of at most 256 bytes)
**                          whose conversations this call may start from; see
**                          SESSIONS AND ISOLATION (1.11; default: the config's)
**     request_id           a string of at most 256 bytes naming this call, so
**                          that el_cancel_request can stop it alone (1.3)
**     cache_prompt         reuse the cached prompt prefix              (true);
**                          false evaluates the whole prompt afresh
**     speculative          "off" | "ngram-simple" | {"type": "ngram-simple",
**                          "size_n": 1..32 (4), "size_m": 1..64 (16)}: draft
**                          up to size_m tokens that followed the last size_n
**                          tokens where they occur earlier in the context
**                          (llama.cpp's common/ngram-map), and verify them in
**                          the call's next decode step (1.10; default: the
**                          config's, "off"). SPECULATION below.
**     _test                test-only hooks (unstable; absent from builds
**                          without EL_TEST_HOOKS; a probe call adds the
**                          result field "_test_probe")
**
**   "required", a named function and "json_schema" are enforced with a
**   grammar: the output is valid by construction. With tool_choice "required"
**   or a named function, the model writes the call as JSON
**   {"name": ..., "arguments": {...}} (an array of them if parallel calls are
**   allowed), which is returned as tool_calls.
**
**   BARE-JSON CALLS. With tools offered, tool_choice "auto" and recovery on,
**   a call written as bare JSON at the start of the output (the form small
**   models fall back to) is constrained by a lazy grammar as well: once the
**   output begins {"name": (after optional whitespace, an optional ```json
**   fence and, with parallel_tool_calls, an optional "["), it must name an
**   offered tool with arguments that match its schema, be one call (or one
**   list of calls), close the fence it opened, and then the output ends. Where
**   the template has a tool-call syntax of its own (qwen's <tool_call>), its
**   grammar is kept as the other alternative, with its own trigger. Output
**   that starts any other way, including a JSON object whose first key is not
**   "name", stays free.
**
**   TOOL-CALL RECOVERY. Small models often write a call as JSON in the text
**   instead of in their template's tool-call syntax. When tools were offered
**   (tool_choice not "none") and the whole content is one such call, a list
**   of them, or one per line, bare or in a single ```json fence, naming
**   offered tools with an arguments object, it is returned as tool_calls with
**   finish_reason "tool_calls". When the output ran out inside such a
**   sequence, its complete leading calls are returned (finish_reason stays
**   "length"); an exact repeat of a call is returned once. Text around the
**   JSON, an unknown tool name or a missing arguments object leave the content
**   as it is. Off with "tool_call_recovery": false (config or options).
**
**   INVALID CALLS. A call (recovered, or parsed from the template's syntax)
**   whose arguments do not match its tool's parameter schema (type, enum,
**   const, required, properties, additionalProperties, items, anyOf/oneOf/
**   allOf, minimum/maximum, minItems/maxItems; other keywords are not checked)
**   is never in tool_calls: it goes to invalid_tool_calls with the reason.
**   When a turn holds only invalid calls, content keeps the text the model
**   wrote, so a caller that ignores invalid_tool_calls sees an answer, not a
**   call it cannot run; an agent should send each error back as that call's
**   result (pyshim's Agent does). Calls in the template's syntax of a turn cut
**   off at a limit (finish_reason "length") are returned as written, unchecked:
**   the last may be incomplete, and the result agrees with what was streamed.
**
** Returns (owned by the caller, release with el_free) a JSON object:
**   message            {"role": "assistant", "content", "tool_calls"?,
**                      "reasoning_content"?}, ready to append to messages
**   content            string, or null when the turn is only tool calls
**   reasoning_content  string or null
**   tool_calls         array of {"id", "type": "function", "function":
**                      {"name", "arguments": <JSON text>}}
**   invalid_tool_calls array of calls whose arguments fail their tool's
**                      schema: {"id", "type", "function", "error": why}
**                      (see INVALID CALLS); not in message (since 1.1)
**   finish_reason      "stop" | "length" | "tool_calls" | "cancelled"; a turn
**                      cut off (length) while writing a call in the
**                      template's syntax returns that call as far as it was
**                      written, as the stream showed it (its arguments may
**                      be incomplete JSON)
**   truncated          true when the context filled up before the end
**   usage              {"prompt_tokens", "completion_tokens", "total_tokens"}
**   n_prompt, n_reused, n_decoded
**                      prompt tokens; of those, taken from the cache; tokens
**                      generated
**   ms_prepare, ms_template, ms_tokenize, ms_sampler
**                      time to turn the request into tokens, grammar and
**                      sampler (parsing, the chat template, tokenizing); of
**                      that, rendering the chat template, tokenizing the
**                      prompt, and building the sampler and its grammar
**                      (ms_tokenize and ms_sampler since 1.2)
**   n_tokenize_reused  prompt tokens taken from an earlier prompt's
**                      tokenization instead of tokenized again: a prompt is
**                      tokenized only from the last special token (e.g. the
**                      start of a message) before its first changed byte.
**                      The tokens are always those of a full tokenization
**                      (since 1.2)
**   n_render_reused    iterations of the chat template's loops (usually one
**                      per message) taken from earlier calls' renders
**                      instead of run again: an iteration is reused only
**                      when everything it reads is the same as then. The
**                      prompt is always that of a full render (since 1.4)
**   n_messages_reused  messages taken, already read and checked, from the
**                      same session's earlier calls instead of parsed
**                      again: a message is reused only when its JSON text
**                      is the same bytes (since 1.5)
**   ms_reset, ms_prefill, ms_decode
**                      time to match and trim or restore the cache; to
**                      evaluate the new prompt tokens; to generate
**   logprobs           {"content": [{"token", "logprob", "bytes", "id",
**                      "top_logprobs": [...]}]} when asked for; "id" (not in
**                      OpenAI's shape) is the token id that logit_bias takes.
**                      One per token of the output, so the tokens join to
**                      the text; the end-of-generation token that ended it
**                      is apart, under "end" (1.12)
**   slot               which conversation slot served the call; null when
**                      the call was cancelled before it was given one
**   restored_from_host true when that slot's cache was restored from the
**                      host-memory state cache before reuse
**   shared_prefix      true when it started from a copy of another
**                      conversation of the call's scope (1.11)
**   restored_from_disk true when it started from a disk-tier entry (1.11)
**   n_batched_max      the most calls whose tokens were evaluated in one
**                      decode step together with this call's: 1 when it
**                      decoded alone, 0 when it decoded nothing (since 1.3;
**                      see THREADS)
**   n_argmax           of the tokens decoded, those chosen by reading the
**                      argmax of the (biased) logits rather than through the
**                      sampler chain: greedy decoding without a grammar. A
**                      call with tools carries a (lazy) grammar, so it reads
**                      0. Which tokens are read so is the library's choice,
**                      not a promise (1.6)
**   n_drafted, n_accepted  tokens speculation drafted, and of those the ones
**                      the call's own choice confirmed (1.10)
**   warnings           present only when something went otherwise than
**                      asked without failing the call: an array of
**                      messages (1.13; today: tools given to a model whose
**                      chat template does not show them to it)
**   abi_version        EL_ABI_VERSION
** or {"error": "..."}. Calls on one handle run concurrently up to n_seq (see
** THREADS).
**
** SPECULATION. A draft is offered only where the next token is a function
** of the logits alone (temperature <= 0: greedy, or a grammar's greedy
** choice), without logprobs, on a cache that can drop a suffix (dense models;
** sliding-window, recurrent and hybrid ones never draft, and n_drafted stays
** 0). Each drafted token is checked at its row by the same choice that would
** have picked it one step at a time, in order; the first that differs, and
** all after it, leave the cache before the step ends. So the output is the
** same as without speculation: bit for bit on "deterministic" handles, and
** elsewhere up to the rounding of the larger batch (a near-tie may go the
** other way, as CACHE says). Stop strings, max_tokens, grammars, streaming,
** cancel and timeouts see the accepted tokens one by one, as if decoded alone.
** A call drafts only while no other call runs on the handle: a drafted row
** lengthens the shared step for every call in it, so speculation never slows
** the calls beside it (a draft never exceeds n_batch / n_seq either).
** COST: each drafted row also attends over the whole context, so a call's
** drafts start at 2 tokens, double while accepted whole, shrink
** to one past what was accepted otherwise, and after a draft of which
** nothing was accepted drafting pauses (1, 2, 4 ... 32 tokens).
** OFF BY DEFAULT: without "deterministic" the larger batch can flip a
** near-tie, and a default must not change what greedy decoding says. Ask for
** it per call or per handle where the output copies its context
** (docs/abi-rationale.md has the measurements behind both choices).
**
** A FAILED CALL (an error after the call was given a slot) leaves its own slot
** empty and unpinned; a conversation it evicted stays saved in host memory as
** on success (saving it may push the oldest saved conversations out of the
** state_cache_mib budget), and a saved copy of its own conversation that it
** restored is put back, so the session's next call restores it again.
*/
EL_API char *el_generate(el_handle *handle, const char *messages_json,
                         const char *tools_json, const char *options_json);

/*
** el_stream_cb: receives one delta while el_generate_stream decodes.
** delta_json is an object with any of "content", "reasoning_content" (text
** to append) and "tool_calls" ([{"index", "id"?, "type"?, "function":
** {"name"?, "arguments"?}}], OpenAI's streaming shape: the id and name come
** with the first delta of a call, and that id is the call's id in the final
** result; the arguments text is appended across deltas). While a long prompt is evaluated (more than n_batch new tokens),
** deltas {"prompt_progress": {"processed", "total"}} report its progress; they
** carry no text. With logprobs asked for, a delta with text also carries
** "logprobs": {"content": [...]}, the entries (as in the result) of the tokens
** decoded since the previous such delta (1.9): the concatenation is a prefix of
** the result's logprobs; tokens whose text was held back (a stop string, the
** end) are only in the result. The first delta sent after the call's slot was
** prepared (text or progress) also carries "prompt": {"n_prompt", "n_reused"},
** once, as the result will give them (1.12). delta_json is valid only during the callback. Return 0 to go on, non-zero
** to stop: the call then returns finish_reason "cancelled" with the text so
** far, and the cache stays consistent. The callback runs on the calling
** thread and must not call into the same handle.
*/
typedef int (*el_stream_cb)(const char *delta_json, void *user_data);

/*
** el_generate_stream: el_generate that reports deltas as they are decoded.
** The concatenated deltas equal the final result's content, reasoning and
** tool calls; the return value is the same final result as el_generate's.
*/
EL_API char *el_generate_stream(el_handle *handle, const char *messages_json,
                                const char *tools_json, const char *options_json,
                                el_stream_cb callback, void *user_data);

/*
** el_embed (1.10): embeddings of texts, pooled from the model's hidden states.
**
**   input_json    a string, an array of strings (at most 2048), an array of
**                 token ids, or an array of such arrays; strings are tokenized
**                 as the model's vocabulary says (its BOS/EOS added where it
**                 adds them), no chat template applied
**   options_json  NULL or an object: normalize (unit length, as OpenAI's
**                 embeddings are; true), truncate (an input longer than
**                 embd_ctx keeps its first embd_ctx tokens rather than being
**                 refused; false), timeout_ms (0: none)
**
** Returns {"data": [{"index", "embedding": [n_embd floats], "n_tokens",
** "truncated"?}], "n_embd", "pooling" ("mean" | "cls" | "last"),
** "normalized", "n_tokens" (all inputs), "ms_total", "abi_version"}, or
** {"error": ...}: an empty string, a token id outside the vocabulary, an
** input over embd_ctx without truncate, a handle with "rpc" devices (not
** served), a dead, closed or inherited handle, el_cancel, el_close or the
** timeout (each stops it within one input's evaluation).
**
** The embeddings come from a context of their own beside the slots (created on
** the first el_embed: embd_ctx tokens of cache and its compute buffer), on the
** same weights. Each input is evaluated alone, in one batch, on a cleared cache:
** its vector depends only on its tokens, never on other inputs, other calls or
** what the slots hold, and it reads and writes no conversation's state.
** WHAT IT MAY DO TO OTHER CALLS: its evaluations take turns with the handle's
** generation steps on the compute lane (see THREADS), each costing them the
** time one input takes; it never takes the handle's lock, so generations go on
** between its inputs. Embed calls on one handle run one at a time: a second
** waits (bounded by its timeout_ms, el_cancel and el_close). Thread-safe.
*/
EL_API char *el_embed(el_handle *handle, const char *input_json, const char *options_json);

/*
** el_cancel: ask every call that has begun on this handle (running, or
** waiting for the handle) to stop as soon as possible (within one decode
** step); each returns finish_reason "cancelled", and one that had not started
** running changes nothing on the handle. Calls begun after el_cancel returns
** are not affected, so a cancel can never be lost to timing. Never blocks;
** may be called from any thread, and from a stream callback of another
** handle. Returns 0, or -1 for an invalid or closed handle (EL_E_CLOSED in
** el_last_error).
*/
EL_API int el_cancel(el_handle *handle);

/*
** el_cancel_request: ask the calls on this handle whose options named this
** "request_id" to stop, as el_cancel does, leaving every other call alone;
** a call that begins with this id after el_cancel_request returns stops at
** once too (the handle remembers the last 64 ids cancelled), so a cancel sent
** just before its call started is not lost. Give each call its own id. Never
** blocks; may be called from any thread. Returns 0, or -1 for an invalid or
** closed handle (EL_E_CLOSED) or an id that is NULL, empty or longer than 256
** bytes (EL_E_INVALID); el_last_error says which.
** (since 1.3)
*/
EL_API int el_cancel_request(el_handle *handle, const char *request_id);

/*
** el_reset: drop everything cached for this handle (KV cache, checkpoints,
** host-memory state cache, session pins, and the disk tier's entries of its
** model and settings, which any handle could restore; 1.12),
** so that nothing of one conversation can influence the next. It does not
** wait for calls in progress: they finish as they would, and the slot each
** runs on is cleared as it ends, so no call that begins after el_reset
** returns sees anything cached before. Returns 0, or -1 for an invalid or
** closed handle (EL_E_CLOSED) or a dead one (EL_E_DEVICE); el_last_error says
** which.
*/
EL_API int el_reset(el_handle *handle);

/*
** el_forget: drop what is cached for one session (its slot's KV cache,
** checkpoints, any host-memory copy and its disk-tier files (1.12), the
** messages and prompts it sent as
** read and tokenized), or everything when session is NULL. The chat
** template's values of every session's messages go too (they are rebuilt on
** each session's next call).
** session "" is the pool of calls that name no session: every unpinned slot and
** their host-memory copies. Like el_reset it does not wait for calls in
** progress (a slot in use is cleared as its call ends). Returns 0, or -1 for
** an invalid or closed handle (EL_E_CLOSED) or a dead one (EL_E_DEVICE);
** el_last_error says which.
*/
EL_API int el_forget(el_handle *handle, const char *session);

/*
** el_forget_scope: as el_forget, for a session of a named scope (scope must not
** be NULL; "" is a name too): drop what is cached for that session, or for
** every session of the scope and its pool when session is NULL (then the
** request caches of every session go too: they are keyed by owner, and only
** save preparation time). el_forget's session is one of the scope calls name
** by default (the config's "scope", or none). Returns 0, or -1 for an
** invalid, closed or dead handle or a NULL scope (EL_E_INVALID); el_last_error
** says which. (since 1.11)
*/
EL_API int el_forget_scope(el_handle *handle, const char *scope, const char *session);

/*
** el_stats: a JSON object describing the handle: model, n_ctx (per slot),
** n_threads, n_gpu_layers, rpc (the endpoints), devices (the GPU and
** remote devices layers can be offloaded to, "NAME (description)"),
** flash_attn (the configured setting) and flash_attn_in_use (whether the
** context really computes attention with it, "auto" resolved; since 1.1),
** deterministic (since 1.2),
** chat_template (since 1.13: {"source": "model" | "config" | "chatml
** fallback", "supports_tools", "supports_system_role"}, llama.cpp's probe of
** what the template shows the model),
** cache (tokens resident, checkpoints held and their bytes, in
** total and per slot, with each slot's session and whether a call runs on
** it), evaluation (since 1.3; counted since el_open: decode_steps and
** decode_tokens, the batches of one token per running call and the tokens
** in them, ms_decode_steps the time llama_decode took for them; likewise
** prompt_batches, prompt_tokens, ms_prompt_batches for prompt chunks).
** Release with el_free. {"error": ...} for an invalid handle.
*/
EL_API char *el_stats(el_handle *handle);

/*
** el_close: cancel any call in progress, wait for it, free the handle.
** With a cache_dir, what the slots and host memory hold is written to the
** disk tier first (a file per conversation, the time it takes to write
** its state; a write that fails is skipped).
** Returns 0, or -1 if the handle was invalid or already closed (no crash;
** EL_E_CLOSED in el_last_error).
** A handle inherited through fork() is released without waiting or freeing
** (see THREADS) and returns 0.
*/
EL_API int el_close(el_handle *handle);

/* el_free: release a string returned by this library. NULL is ignored. */
EL_API void el_free(char *str);

#ifdef __cplusplus
}
#endif

#endif /* EL_SHIM_H */
