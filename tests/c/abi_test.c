/* The C ABI exercised from C alone: bad input, streaming, cancellation, misuse of handles.
 * Built by native/CMakeLists.txt as el_abi_test; `make test` runs it, and `make asan` runs it
 * under AddressSanitizer, UndefinedBehaviorSanitizer and LeakSanitizer.
 *
 *   el_abi_test MODEL.gguf      prints "N passed, M failed" and exits non-zero on any failure
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "el_shim.h"

static int passed, failed;

#define CHECK(cond, what)                                                   \
    do {                                                                    \
        if (cond) {                                                         \
            passed++;                                                       \
        } else {                                                            \
            failed++;                                                       \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, what);  \
        }                                                                   \
    } while (0)

static const char *HI = "[{\"role\": \"user\", \"content\": \"Say hi.\"}]";
static const char *LONG = "[{\"role\": \"user\", \"content\": \"Tell me a very long story about the sea.\"}]";

static int is_error(const char *json) { return strncmp(json, "{\"error\"", 8) == 0; }

/* Whether an error object carries this el_code. */
static int has_code(const char *json, el_code code) {
    char want[32];
    snprintf(want, sizeof want, "\"code\":%d}", (int) code);
    return strstr(json, want) != NULL;
}

/* Generates, checks the result is (or is not) an error, frees it. */
static void expect(el_handle *h, const char *msgs, const char *tools, const char *opts, int want_error,
                   const char *what) {
    char *r = el_generate(h, msgs, tools, opts);
    CHECK(r != NULL && is_error(r) == want_error, what);
    el_free(r);
}

static int deltas;
static int count_and_stop(const char *delta, void *user) {
    (void) delta;
    deltas++;
    return deltas >= *(int *) user;
}

static void *cancel_later(void *h) {
    usleep(200 * 1000);
    el_cancel((el_handle *) h);
    return NULL;
}

/* Concurrent calls on one handle with three slots: one per thread, "b" stopped alone. */
struct concurrent_call {
    el_handle *h;
    const char *id;
    char *result;
};

static void *generate_with_id(void *arg) {
    struct concurrent_call *c = arg;
    char opts[256];
    snprintf(opts, sizeof opts, "{\"max_tokens\": 24, \"ignore_eos\": true, \"request_id\": \"%s\"}", c->id);
    c->result = el_generate(c->h, LONG, NULL, opts);
    return NULL;
}

static void concurrent_calls(const char *model) {
    char config[4096];
    snprintf(config, sizeof config, "{\"model\": \"%s\", \"n_ctx\": 512, \"n_seq\": 3, \"temperature\": 0}", model);
    el_handle *h = el_open(config);
    CHECK(h != NULL, "open with three slots");
    if (h == NULL) {
        return;
    }
    struct concurrent_call calls[3] = {{h, "a", NULL}, {h, "b", NULL}, {h, "c", NULL}};
    pthread_t t[3];
    for (int i = 0; i < 3; i++) {
        pthread_create(&t[i], NULL, generate_with_id, &calls[i]);
    }
    usleep(100 * 1000);
    CHECK(el_cancel_request(h, "b") == 0, "cancel one request");
    for (int i = 0; i < 3; i++) {
        pthread_join(t[i], NULL);
    }
    CHECK(strstr(calls[1].result, "\"finish_reason\":\"cancelled\"") != NULL, "the cancelled request stopped");
    for (int i = 0; i < 3; i += 2) {
        CHECK(strstr(calls[i].result, "\"finish_reason\":\"length\"") != NULL &&
                  strstr(calls[i].result, "\"n_decoded\":24") != NULL,
              "the other requests ran to their end");
    }
    for (int i = 0; i < 3; i++) {
        el_free(calls[i].result);
    }
    CHECK(el_cancel_request(h, NULL) == -1 && el_cancel_request(h, "") == -1, "cancel_request without an id");
    CHECK(el_cancel_request(NULL, "a") == -1, "cancel_request NULL handle");
    /* close while three calls run: each returns, el_close frees the handle */
    for (int i = 0; i < 3; i++) {
        pthread_create(&t[i], NULL, generate_with_id, &calls[i]);
    }
    usleep(100 * 1000);
    CHECK(el_close(h) == 0, "close with calls in flight");
    for (int i = 0; i < 3; i++) {
        pthread_join(t[i], NULL);
        CHECK(calls[i].result != NULL, "a call in flight at close returns");
        el_free(calls[i].result);
    }
}

/* JSON of `depth` nested arrays inside `before` ... `after`; the caller frees it. */
static char *nested(const char *before, size_t depth, const char *after) {
    size_t nb = strlen(before), na = strlen(after);
    char *s = malloc(nb + 2 * depth + na + 1);
    memcpy(s, before, nb);
    memset(s + nb, '[', depth);
    memset(s + nb + depth, ']', depth);
    memcpy(s + nb + 2 * depth, after, na + 1);
    return s;
}

/* Nesting far past the library's bound (512), in every JSON input: an error naming it, never a
 * stack overflow (60,000 levels crashed the process before the bound); then a good call. */
static void deep_nesting(el_handle *h) {
    static const size_t depths[] = {513, 60000, 1000000};
    for (size_t i = 0; i < sizeof depths / sizeof depths[0]; i++) {
        size_t d = depths[i];
        char *msgs = nested("[{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", \"tool_calls\": "
                            "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": ", d, "}}]}]");
        char *args = nested("[{\"role\": \"assistant\", \"tool_calls\": [{\"type\": \"function\", \"function\": "
                            "{\"name\": \"f\", \"arguments\": \"", d, "\"}}]}, {\"role\": \"user\", \"content\": \"x\"}]");
        char *tools = nested("[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"a\": ", d, "}}}]");
        char *opts = nested("{\"response_format\": {\"type\": \"json_object\", \"schema\": {\"a\": ", d, "}}}");
        char *config = nested("{\"model\": \"x.gguf\", \"n_ctx\": ", d, "}");
        const char *inputs[][3] = {{msgs, NULL, NULL}, {args, NULL, NULL}, {HI, tools, NULL}, {HI, NULL, opts}};
        for (size_t j = 0; j < 4; j++) {
            char *r = el_generate(h, inputs[j][0], inputs[j][1], inputs[j][2]);
            CHECK(r != NULL && is_error(r) && strstr(r, "deeper than 512") != NULL, "deep nesting is an error");
            el_free(r);
        }
        CHECK(el_open(config) == NULL && strstr(el_last_error(), "deeper than 512") != NULL, "deep config");
        free(msgs), free(args), free(tools), free(opts), free(config);
        expect(h, HI, NULL, "{\"max_tokens\": 3}", 0, "call after deep nesting");
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s MODEL.gguf\n", argv[0]);
        return 2;
    }
    char config[4096];
    snprintf(config, sizeof config, "{\"model\": \"%s\", \"n_ctx\": 1024, \"temperature\": 0}", argv[1]);

    /* what the library was built from, static and valid before any handle exists */
    CHECK(el_build_info() != NULL && el_build_info()[0] == '{' && strstr(el_build_info(), "\"patches\":") != NULL &&
              el_build_info() == el_build_info(),
          "build info");

    /* el_open failures carry a message and the class of failure (el_code, 1.13) */
    CHECK(el_open("{\"model\": \"/no/such.gguf\"}") == NULL, "open missing file");
    CHECK(strstr(el_last_error(), "not found") != NULL, "missing-file message");
    CHECK(has_code(el_last_error(), EL_E_NOT_FOUND), "missing-file code");
    CHECK(el_open("{oops") == NULL && strstr(el_last_error(), "JSON") != NULL, "open bad JSON");
    CHECK(has_code(el_last_error(), EL_E_INVALID), "bad JSON code");
    CHECK(el_open("{\"model\": \"x.gguf\", \"n_ctz\": 1}") == NULL && has_code(el_last_error(), EL_E_UNKNOWN_KEY),
          "unknown key code");
    CHECK(el_open(NULL) == NULL, "open NULL");

    el_handle *h = el_open(config);
    CHECK(h != NULL, "open model");
    if (h == NULL) {
        fprintf(stderr, "%s\n", el_last_error());
        return 1;
    }

    /* bad input, each followed by a good call */
    const char *bad[][3] = {
        {"{", NULL, NULL},
        {"[]", NULL, NULL},
        {"[{\"role\": \"alien\", \"content\": \"x\"}]", NULL, NULL},
        {"[{\"role\": \"user\", \"content\": \"x\"}]", "{}", NULL},
        {"[{\"role\": \"user\", \"content\": \"x\"}]", NULL, "{\"max_tokens\": 0}"},
        {"[{\"role\": \"user\", \"content\": \"x\"}]", NULL, "{\"temperature\": \"warm\"}"},
        {"[{\"role\": \"user\", \"content\": \"\\ud800\"}]", NULL, NULL},
        {NULL, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        expect(h, bad[i][0], bad[i][1], bad[i][2], 1, "bad input is an error");
        expect(h, HI, NULL, "{\"max_tokens\": 3}", 0, "next call works");
    }

    deep_nesting(h);

    /* streaming: stop from the callback after 3 deltas */
    int stop_after = 3;
    deltas = 0;
    char *r = el_generate_stream(h, LONG, NULL, "{\"max_tokens\": 200}", count_and_stop, &stop_after);
    CHECK(strstr(r, "\"finish_reason\":\"cancelled\"") != NULL && deltas == 3, "stream stopped by callback");
    el_free(r);
    expect(h, HI, NULL, "{\"max_tokens\": 3}", 0, "call after a stopped stream");

    /* cancellation from another thread */
    pthread_t t;
    pthread_create(&t, NULL, cancel_later, h);
    r = el_generate(h, LONG, NULL, "{\"max_tokens\": 5000}");
    pthread_join(t, NULL);
    CHECK(strstr(r, "\"finish_reason\":\"cancelled\"") != NULL, "cancel from another thread");
    el_free(r);

    /* embeddings (1.10): a vector for good input, an error for bad, NULL options allowed */
    r = el_embed(h, "[\"a cat\", \"a dog\"]", NULL);
    CHECK(!is_error(r) && strstr(r, "\"index\":1") != NULL && strstr(r, "\"n_embd\":") != NULL, "embed");
    el_free(r);
    const char *bad_embed[] = {"\"\"", "[]", "{", "[-1]", NULL};
    for (size_t i = 0; i < sizeof bad_embed / sizeof bad_embed[0]; i++) {
        r = el_embed(h, bad_embed[i], NULL);
        CHECK(is_error(r), "bad embed input is an error");
        el_free(r);
    }
    r = el_embed(h, "\"x\"", "{\"nope\": 1}");
    CHECK(is_error(r) && strstr(r, "nope") != NULL, "unknown embed option named");
    el_free(r);

    /* scopes (1.11): a session of a named scope starts from another's prefix; forgetting */
    /* the scope drops it; a NULL scope is refused */
    expect(h, LONG, NULL, "{\"max_tokens\": 1, \"scope\": \"t\", \"session\": \"a\"}", 0, "scoped call");
    r = el_generate(h, LONG, NULL, "{\"max_tokens\": 1, \"scope\": \"t\", \"session\": \"b\"}");
    CHECK(strstr(r, "\"shared_prefix\":true") != NULL || strstr(r, "\"n_reused\":0") == NULL, "prefix shared in a scope");
    el_free(r);
    CHECK(el_forget_scope(h, "t", "b") == 0 && el_forget_scope(h, "t", NULL) == 0, "forget a scope");
    CHECK(el_forget_scope(h, NULL, "b") == -1, "forget_scope needs a scope");
    expect(h, HI, NULL, "{\"max_tokens\": 1, \"scope\": 7}", 1, "a scope that is not a string");

    /* stats, reset */
    r = el_stats(h);
    CHECK(!is_error(r) && strstr(r, "\"n_ctx\":1024") != NULL, "stats");
    el_free(r);
    CHECK(el_reset(h) == 0, "reset");

    concurrent_calls(argv[1]);

    /* misuse of handles */
    CHECK(el_close(h) == 0, "close");
    CHECK(el_close(h) == -1 && has_code(el_last_error(), EL_E_CLOSED), "close twice");
    expect(h, HI, NULL, NULL, 1, "use after close");
    expect(NULL, HI, NULL, NULL, 1, "NULL handle");
    CHECK(el_cancel(NULL) == -1 && el_reset(NULL) == -1, "cancel/reset NULL");
    CHECK(has_code(el_last_error(), EL_E_CLOSED), "reset NULL code");
    CHECK(el_forget_scope(NULL, NULL, NULL) == -1 && has_code(el_last_error(), EL_E_INVALID), "forget NULL scope code");
    r = el_embed(h, "\"x\"", NULL);
    CHECK(is_error(r) && strstr(r, "closed") != NULL, "embed after close");
    el_free(r);
    el_free(NULL);

    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
