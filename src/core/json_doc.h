/* src/core/json_doc.h — defines: reading the project's JSON documents (plans, clusters, ...)
 * with the errors every format shares: unreadable file, NUL bytes, malformed JSON with line,
 * column and the text near the fault. */
#ifndef QSYNC_CORE_JSON_DOC_H
#define QSYNC_CORE_JSON_DOC_H

#include <stddef.h>
#include <cjson/cJSON.h>

#include "qsync/status.h"

/* Parse text (NUL-terminated) into *out (caller deletes). `what` names the document kind in
 * messages ("plan", "cluster"), origin the file. Malformed JSON → QS_ERR_FORMAT with line and
 * column. */
qs_status qs_json_parse(const char *text, const char *what, const char *origin, cJSON **out);
/* Read path (at most max_bytes) and parse it as above. */
qs_status qs_json_read(const char *path, size_t max_bytes, const char *what, cJSON **out);

#endif
