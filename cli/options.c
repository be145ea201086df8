/* cli/options.c — option parsing. */
#include "options.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void qs_cli_usage(FILE *f, const char *cmd, const char *summary, const qs_cli_opt *opts, int n) {
    fprintf(f, "usage: qsync %s [options]\n%s\n\noptions:\n", cmd, summary);
    for (int i = 0; i < n; i++) {
        char left[64];
        if (opts[i].type == QS_CLI_FLAG || opts[i].type == QS_CLI_NOFLAG)
            snprintf(left, sizeof left, "--%s", opts[i].name);
        else
            snprintf(left, sizeof left, "--%s %s", opts[i].name, opts[i].arg ? opts[i].arg : "X");
        fprintf(f, "  %-26s %s\n", left, opts[i].help);
    }
    fprintf(f, "  %-26s %s\n", "--help", "show this help");
}

/* Store text into opt->dest according to its type; 0 or 2 (message printed). */
static int qs_cli_store(const qs_cli_opt *o, const char *text, const char *cmd) {
    char *end = NULL;
    errno = 0;
    switch (o->type) {
    case QS_CLI_STR:
        *(const char **)o->dest = text;
        return 0;
    case QS_CLI_I64:
    case QS_CLI_INT: {
        long long v = strtoll(text, &end, 10);
        if (errno || end == text || *end) break;
        if (o->type == QS_CLI_INT) *(int *)o->dest = (int)v;
        else *(int64_t *)o->dest = v;
        return 0;
    }
    case QS_CLI_U64: {
        unsigned long long v = strtoull(text, &end, 10);
        if (errno || end == text || *end || text[0] == '-') break;
        *(uint64_t *)o->dest = v;
        return 0;
    }
    case QS_CLI_FLOAT:
    case QS_CLI_DOUBLE: {
        double v = strtod(text, &end);
        if (errno || end == text || *end) break;
        if (o->type == QS_CLI_FLOAT) *(float *)o->dest = (float)v;
        else *(double *)o->dest = v;
        return 0;
    }
    default:
        break;
    }
    fprintf(stderr, "qsync %s: option --%s expects %s, got '%s'\n", cmd, o->name,
            o->type == QS_CLI_FLOAT || o->type == QS_CLI_DOUBLE ? "a number" : o->type == QS_CLI_U64 ? "a non-negative integer" : "an integer",
            text);
    return 2;
}

int qs_cli_parse(int argc, char **argv, int first, const qs_cli_opt *opts, int n, const char *cmd,
                 const char *summary) {
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            qs_cli_usage(stdout, cmd, summary, opts, n);
            return 1;
        }
        if (strncmp(a, "--", 2) != 0) {
            fprintf(stderr, "qsync %s: unexpected argument '%s' (options start with --; see qsync %s --help)\n", cmd,
                    a, cmd);
            return 2;
        }
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const qs_cli_opt *o = NULL;
        for (int k = 0; k < n && !o; k++)
            if (strlen(opts[k].name) == len && strncmp(opts[k].name, name, len) == 0) o = &opts[k];
        if (!o) {
            fprintf(stderr, "qsync %s: unknown option '--%.*s' (see qsync %s --help)\n", cmd, (int)len, name, cmd);
            return 2;
        }
        if (o->type == QS_CLI_FLAG || o->type == QS_CLI_NOFLAG) {
            if (eq) {
                fprintf(stderr, "qsync %s: option --%s takes no value\n", cmd, o->name);
                return 2;
            }
            *(bool *)o->dest = o->type == QS_CLI_FLAG;
            continue;
        }
        const char *val = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!val) {
            fprintf(stderr, "qsync %s: option --%s needs a value (%s)\n", cmd, o->name, o->arg ? o->arg : "X");
            return 2;
        }
        if (qs_cli_store(o, val, cmd)) return 2;
    }
    return 0;
}

/* --device: "cpu" → *cuda false; "cuda" → device 0; "cuda:N" → device N. False for anything else. */
bool qs_cli_parse_device(const char *text, bool *cuda, int *device) {
    *cuda = false;
    *device = 0;
    if (strcmp(text, "cpu") == 0) return true;
    *cuda = true;
    if (strcmp(text, "cuda") == 0) return true;
    if (strncmp(text, "cuda:", 5) != 0 || text[5] < '0' || text[5] > '9') return false;
    char *end = NULL;
    long n = strtol(text + 5, &end, 10);
    *device = (int)n;
    return *end == '\0' && n <= 1024;
}

