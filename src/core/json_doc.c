/* src/core/json_doc.c — see json_doc.h. */
#include "core/json_doc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/atomic_file.h"

/* Line and column (1-based) of byte offset `at` in text. */
static void line_col(const char *text, size_t at, int *line, int *col) {
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < at && text[i]; i++) {
        if (text[i] == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

qs_status qs_json_parse(const char *text, const char *what, const char *origin, cJSON **out) {
    *out = NULL;
    if (!text) return QS_FAIL(QS_ERR_INVALID_ARG, "%s %s: no text", what, origin);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    if (!root) {
        size_t at = end && end >= text ? (size_t)(end - text) : 0;
        int line, col;
        line_col(text, at, &line, &col);
        char near[24];
        snprintf(near, sizeof near, "%.20s", text + at);
        for (char *c = near; *c; c++)
            if (*c == '\n' || *c == '\r' || *c == '\t') *c = ' ';
        return QS_FAIL(QS_ERR_FORMAT, "%s %s: malformed JSON at line %d, column %d (near \"%s\"): a %s is one JSON "
                       "object; check quotes, commas and braces", what, origin, line, col, near, what);
    }
    *out = root;
    return QS_OK;
}

qs_status qs_json_read(const char *path, size_t max_bytes, const char *what, cJSON **out) {
    *out = NULL;
    void *data = NULL;
    size_t size = 0;
    qs_status st = qs_read_file(path, max_bytes, &data, &size);
    if (st != QS_OK) return qs_error_wrap(st, "reading %s file: ", what);
    if (memchr(data, '\0', size)) {
        free(data);
        return QS_FAIL(QS_ERR_FORMAT, "%s %s: the file contains a NUL byte; a %s is a JSON text file", what, path, what);
    }
    st = qs_json_parse(data, what, path, out);
    free(data);
    return st;
}
