/* One tool-calling turn through libel_shim, using nothing but el_shim.h.
 *
 *   tool_call MODEL.gguf
 *
 * Prints the result JSON and exits 0 when the model answered with a tool call.
 */
#include <stdio.h>
#include <string.h>

#include "el_shim.h"

static const char *TOOLS =
    "[{\"type\": \"function\", \"function\": {"
    "\"name\": \"get_weather\", \"description\": \"Current weather in a city\","
    "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}},"
    "\"required\": [\"city\"]}}}]";

static const char *MESSAGES = "[{\"role\": \"user\", \"content\": \"What is the weather in Paris?\"}]";

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s MODEL.gguf\n", argv[0]);
        return 2;
    }
    char config[4096];
    snprintf(config, sizeof config, "{\"model\": \"%s\", \"n_ctx\": 2048}", argv[1]);

    el_handle *h = el_open(config);
    if (h == NULL) {
        fprintf(stderr, "el_open failed: %s\n", el_last_error());
        return 1;
    }
    char *result = el_generate(h, MESSAGES, TOOLS, "{\"tool_choice\": \"required\", \"temperature\": 0}");
    printf("%s\n", result);
    int ok = strstr(result, "\"error\"") == NULL && strstr(result, "\"get_weather\"") != NULL;
    el_free(result);
    el_close(h);
    return ok ? 0 : 1;
}
