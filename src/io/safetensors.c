/* src/io/safetensors.c — defines: safetensors writer (atomic) and validating, mmap-based reader. */
#include "io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/atomic_file.h"

/* ------------------------------------------------------------------------------------------
 * Shared helpers
 * ---------------------------------------------------------------------------------------- */

/* numel × size of a shape, false on a negative dimension or overflow past INT64_MAX. */
static bool qs_st_nbytes(int ndim, const int64_t *shape, size_t elem, uint64_t *out) {
    uint64_t n = elem;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return false;
        uint64_t d = (uint64_t)shape[i];
        if (d != 0 && n > (uint64_t)INT64_MAX / d) return false;
        n *= d;
    }
    *out = n;
    return true;
}

/* ------------------------------------------------------------------------------------------
 * Writer
 * ---------------------------------------------------------------------------------------- */

typedef struct qs_st_buf {
    char *p;
    size_t len, cap;
    bool oom;
} qs_st_buf;

static void qs_st_buf_put(qs_st_buf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void qs_st_buf_str(qs_st_buf *b, const char *s) { qs_st_buf_put(b, s, strlen(s)); }

static void qs_st_buf_u64(qs_st_buf *b, uint64_t v) {
    char tmp[24];
    int n = snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)v);
    qs_st_buf_put(b, tmp, (size_t)n);
}

/* A JSON string literal: quotes, backslashes and control characters escaped; other bytes
 * (UTF-8) are copied. */
static void qs_st_buf_json_string(qs_st_buf *b, const char *s) {
    qs_st_buf_put(b, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        char esc[8];
        if (*c == '"' || *c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*c;
            qs_st_buf_put(b, esc, 2);
        } else if (*c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", *c);
            qs_st_buf_put(b, esc, 6);
        } else {
            qs_st_buf_put(b, (const char *)c, 1);
        }
    }
    qs_st_buf_put(b, "\"", 1);
}

/* Check the writer's arguments; fills nbytes[i]. */
static qs_status qs_st_check_inputs(const char *path, const qs_st_tensor *t, int n,
                                    const qs_st_meta *meta, int n_meta, uint64_t *nbytes) {
    if (n < 0 || n_meta < 0 || (n > 0 && !t) || (n_meta > 0 && !meta))
        return QS_FAIL(QS_ERR_INVALID_ARG, "writing '%s': bad tensor or metadata list (n=%d, n_meta=%d)",
                       path, n, n_meta);
    for (int i = 0; i < n; i++) {
        const char *name = t[i].name;
        if (!name || !name[0] || strcmp(name, "__metadata__") == 0)
            return QS_FAIL(QS_ERR_INVALID_ARG, "writing '%s': tensor %d has the name '%s'; names "
                           "must be non-empty and not \"__metadata__\"", path, i, name ? name : "(null)");
        if (!qs_dtype_safetensors_name(t[i].dtype))
            return QS_FAIL(QS_ERR_INVALID_ARG, "writing '%s': tensor '%s' has dtype %d, which has no "
                           "safetensors name", path, name, (int)t[i].dtype);
        if (t[i].ndim < 0 || t[i].ndim > QS_MAX_DIMS)
            return QS_FAIL(QS_ERR_INVALID_ARG, "writing '%s': tensor '%s' has %d dimensions; 0..%d "
                           "are supported", path, name, t[i].ndim, QS_MAX_DIMS);
        if (!qs_st_nbytes(t[i].ndim, t[i].shape, qs_dtype_size(t[i].dtype), &nbytes[i]))
            return QS_FAIL(QS_ERR_INVALID_ARG, "writing '%s': tensor '%s' has a negative or "
                           "overflowing shape", path, name);
        if (nbytes[i] > 0 && !t[i].data)
            return QS_FAIL(QS_ERR_INVALID_ARG, "writing '%s': tensor '%s' has no data", path, name);
        for (int j = 0; j < i; j++)
            if (strcmp(t[j].name, name) == 0)
                return QS_FAIL(QS_ERR_INVALID_ARG, "writing '%s': tensor name '%s' appears twice "
                               "(entries %d and %d)", path, name, j, i);
    }
    for (int i = 0; i < n_meta; i++) {
        if (!meta[i].key || !meta[i].value)
            return QS_FAIL(QS_ERR_INVALID_ARG, "writing '%s': metadata entry %d has a NULL key or value",
                           path, i);
        for (int j = 0; j < i; j++)
            if (strcmp(meta[j].key, meta[i].key) == 0)
                return QS_FAIL(QS_ERR_INVALID_ARG, "writing '%s': metadata key '%s' appears twice",
                               path, meta[i].key);
    }
    return QS_OK;
}

/* The JSON header, padded with spaces to make 8 + length a multiple of 8. */
static qs_status qs_st_build_header(const char *path, const qs_st_tensor *t, int n,
                                    const qs_st_meta *meta, int n_meta, const uint64_t *nbytes,
                                    qs_st_buf *b) {
    qs_st_buf_put(b, "{", 1);
    bool first = true;
    if (n_meta > 0) {
        qs_st_buf_str(b, "\"__metadata__\":{");
        for (int i = 0; i < n_meta; i++) {
            if (i) qs_st_buf_put(b, ",", 1);
            qs_st_buf_json_string(b, meta[i].key);
            qs_st_buf_put(b, ":", 1);
            qs_st_buf_json_string(b, meta[i].value);
        }
        qs_st_buf_put(b, "}", 1);
        first = false;
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        if (!first) qs_st_buf_put(b, ",", 1);
        first = false;
        qs_st_buf_json_string(b, t[i].name);
        qs_st_buf_str(b, ":{\"dtype\":\"");
        qs_st_buf_str(b, qs_dtype_safetensors_name(t[i].dtype));
        qs_st_buf_str(b, "\",\"shape\":[");
        for (int d = 0; d < t[i].ndim; d++) {
            if (d) qs_st_buf_put(b, ",", 1);
            qs_st_buf_u64(b, (uint64_t)t[i].shape[d]);
        }
        qs_st_buf_str(b, "],\"data_offsets\":[");
        qs_st_buf_u64(b, off);
        qs_st_buf_put(b, ",", 1);
        off += nbytes[i];
        qs_st_buf_u64(b, off);
        qs_st_buf_str(b, "]}");
    }
    qs_st_buf_put(b, "}", 1);
    while (!b->oom && b->len % 8 != 0) qs_st_buf_put(b, " ", 1);
    if (b->oom) return QS_FAIL(QS_ERR_OOM, "writing '%s': out of memory building the header", path);
    if (b->len > QS_ST_MAX_HEADER)
        return QS_FAIL(QS_ERR_INVALID_ARG, "writing '%s': header of %zu bytes exceeds the %u-byte "
                       "limit; use fewer tensors or shorter metadata", path, b->len, QS_ST_MAX_HEADER);
    return QS_OK;
}

qs_status qs_safetensors_write(const char *path, const qs_st_tensor *tensors, int n,
                               const qs_st_meta *meta, int n_meta) {
    if (!path || !path[0]) return QS_FAIL(QS_ERR_INVALID_ARG, "safetensors write: empty path");
    uint64_t *nbytes = calloc(n > 0 ? (size_t)n : 1, sizeof *nbytes);
    if (!nbytes) return QS_FAIL(QS_ERR_OOM, "writing '%s': out of memory", path);
    qs_st_buf hdr = {0};
    qs_status st = qs_st_check_inputs(path, tensors, n, meta, n_meta, nbytes);
    if (st == QS_OK) st = qs_st_build_header(path, tensors, n, meta, n_meta, nbytes, &hdr);
    if (st != QS_OK) {
        free(nbytes);
        free(hdr.p);
        return st;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)hdr.len >> (8 * i));

    qs_atomic_file af;
    st = qs_atomic_begin(&af, path);
    if (st == QS_OK) st = qs_atomic_write(&af, len8, 8);
    if (st == QS_OK) st = qs_atomic_write(&af, hdr.p, hdr.len);
    for (int i = 0; st == QS_OK && i < n; i++)
        if (nbytes[i] > 0) st = qs_atomic_write(&af, tensors[i].data, (size_t)nbytes[i]);
    if (st == QS_OK)
        st = qs_atomic_commit(&af);
    else
        qs_atomic_abort(&af);
    free(nbytes);
    free(hdr.p);
    return st;
}

/* ------------------------------------------------------------------------------------------
 * Reader
 * ---------------------------------------------------------------------------------------- */

typedef struct qs_st_entry {
    char *name;
    qs_dtype dtype;
    int ndim;
    int64_t shape[QS_MAX_DIMS];
    uint64_t begin, end;
} qs_st_entry;

typedef struct qs_st_name_ref {
    const char *name;          /* entries[index].name */
    int index;
} qs_st_name_ref;

struct qs_st_file {
    char *path;
    unsigned char *map;        /* whole file, read-only */
    size_t map_size;
    const unsigned char *data; /* the byte buffer after the header */
    uint64_t data_size;
    qs_st_entry *entries;      /* in data-offset order */
    int n;
    qs_st_name_ref *by_name;   /* sorted by name */
    char **meta_keys;
    char **meta_values;
    int n_meta;
};

static char *qs_st_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

void qs_safetensors_close(qs_st_file *f) {
    if (!f) return;
    if (f->map) munmap(f->map, f->map_size);
    for (int i = 0; i < f->n; i++) free(f->entries[i].name);
    for (int i = 0; i < f->n_meta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_values[i]);
    }
    free(f->entries);
    free(f->by_name);
    free(f->meta_keys);
    free(f->meta_values);
    free(f->path);
    free(f);
}

/* A JSON number that is a non-negative integer exactly representable as a double. */
static bool qs_st_json_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!isfinite(d) || d < 0 || d > 9007199254740992.0 || d != floor(d)) return false;
    *out = (uint64_t)d;
    return true;
}

/* Parse one tensor entry of the header into e (name already set). */
static qs_status qs_st_parse_entry(const qs_st_file *f, const cJSON *item, qs_st_entry *e) {
    const char *path = f->path;
    if (!cJSON_IsObject(item))
        return QS_FAIL(QS_ERR_FORMAT, "safetensors file '%s': entry '%s' is not a JSON object; the "
                       "file is corrupt or not a safetensors file", path, e->name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!cJSON_IsString(dt) || !cJSON_IsArray(shape) || !cJSON_IsArray(offs))
        return QS_FAIL(QS_ERR_FORMAT, "safetensors file '%s': tensor '%s' lacks a string \"dtype\", "
                       "an array \"shape\" or an array \"data_offsets\"", path, e->name);
    if (!qs_dtype_from_safetensors_name(dt->valuestring, &e->dtype))
        return QS_FAIL(QS_ERR_FORMAT, "safetensors file '%s': tensor '%s' has dtype \"%s\", which "
                       "qsync does not support (supported: F32 BF16 F16 F8_E4M3 F8_E5M2 I8 U8 I32 I64)",
                       path, e->name, dt->valuestring);
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > QS_MAX_DIMS)
        return QS_FAIL(QS_ERR_UNSUPPORTED, "safetensors file '%s': tensor '%s' has %d dimensions; "
                       "qsync supports at most %d", path, e->name, ndim, QS_MAX_DIMS);
    e->ndim = ndim;
    int d = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, shape) {
        uint64_t dim;
        if (!qs_st_json_uint(v, &dim))
            return QS_FAIL(QS_ERR_FORMAT, "safetensors file '%s': tensor '%s' has a shape entry that "
                           "is not a non-negative integer", path, e->name);
        e->shape[d++] = (int64_t)dim;
    }
    if (cJSON_GetArraySize(offs) != 2 || !qs_st_json_uint(cJSON_GetArrayItem(offs, 0), &e->begin) ||
        !qs_st_json_uint(cJSON_GetArrayItem(offs, 1), &e->end) || e->begin > e->end)
        return QS_FAIL(QS_ERR_FORMAT, "safetensors file '%s': tensor '%s' has invalid data_offsets "
                       "(need [begin, end] integers with begin <= end)", path, e->name);
    if (e->end > f->data_size)
        return QS_FAIL(QS_ERR_FORMAT, "safetensors file '%s': tensor '%s' data_offsets [%llu, %llu] "
                       "run past the %llu-byte data buffer; the file is truncated or corrupt",
                       path, e->name, (unsigned long long)e->begin, (unsigned long long)e->end,
                       (unsigned long long)f->data_size);
    uint64_t want = 0;
    if (!qs_st_nbytes(e->ndim, e->shape, qs_dtype_size(e->dtype), &want) || want != e->end - e->begin) {
        char sbuf[128];
        qs_shape_format(e->ndim, e->shape, sbuf, sizeof sbuf);
        return QS_FAIL(QS_ERR_FORMAT, "safetensors file '%s': tensor '%s' has shape %s of %s (%llu "
                       "bytes) but data_offsets span %llu bytes", path, e->name, sbuf,
                       dt->valuestring, (unsigned long long)want,
                       (unsigned long long)(e->end - e->begin));
    }
    return QS_OK;
}

static qs_status qs_st_parse_meta(qs_st_file *f, const cJSON *item) {
    if (!cJSON_IsObject(item))
        return QS_FAIL(QS_ERR_FORMAT, "safetensors file '%s': \"__metadata__\" is not a JSON object",
                       f->path);
    int n = cJSON_GetArraySize(item);
    f->meta_keys = calloc((size_t)n + 1, sizeof *f->meta_keys);
    f->meta_values = calloc((size_t)n + 1, sizeof *f->meta_values);
    if (!f->meta_keys || !f->meta_values)
        return QS_FAIL(QS_ERR_OOM, "safetensors file '%s': out of memory reading metadata", f->path);
    const cJSON *v;
    cJSON_ArrayForEach(v, item) {
        if (!cJSON_IsString(v))
            return QS_FAIL(QS_ERR_FORMAT, "safetensors file '%s': metadata \"%s\" is not a string "
                           "(the format allows only string values)", f->path, v->string);
        for (int j = 0; j < f->n_meta; j++)
            if (strcmp(f->meta_keys[j], v->string) == 0)
                return QS_FAIL(QS_ERR_FORMAT, "safetensors file '%s': metadata key \"%s\" appears twice",
                               f->path, v->string);
        f->meta_keys[f->n_meta] = qs_st_strdup(v->string);
        f->meta_values[f->n_meta] = qs_st_strdup(v->valuestring);
        f->n_meta++;
        if (!f->meta_keys[f->n_meta - 1] || !f->meta_values[f->n_meta - 1])
            return QS_FAIL(QS_ERR_OOM, "safetensors file '%s': out of memory reading metadata", f->path);
    }
    return QS_OK;
}

static int qs_st_cmp_offset(const void *a, const void *b) {
    const qs_st_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

static int qs_st_cmp_name(const void *a, const void *b) {
    return strcmp(((const qs_st_name_ref *)a)->name, ((const qs_st_name_ref *)b)->name);
}

/* Sort the tensors by offset, build the by-name index (rejecting duplicate names) and check
 * that the tensors tile the data buffer exactly. */
static qs_status qs_st_index(qs_st_file *f) {
    qsort(f->entries, (size_t)f->n, sizeof *f->entries, qs_st_cmp_offset);
    f->by_name = malloc(((size_t)f->n + 1) * sizeof *f->by_name);
    if (!f->by_name) return QS_FAIL(QS_ERR_OOM, "safetensors file '%s': out of memory", f->path);
    for (int i = 0; i < f->n; i++) f->by_name[i] = (qs_st_name_ref){f->entries[i].name, i};
    qsort(f->by_name, (size_t)f->n, sizeof *f->by_name, qs_st_cmp_name);
    for (int i = 1; i < f->n; i++)
        if (strcmp(f->by_name[i].name, f->by_name[i - 1].name) == 0)
            return QS_FAIL(QS_ERR_FORMAT, "safetensors file '%s': tensor '%s' appears twice in the header",
                           f->path, f->by_name[i].name);
    uint64_t pos = 0;
    for (int i = 0; i < f->n; i++) {
        const qs_st_entry *e = &f->entries[i];
        if (e->begin < pos)
            return QS_FAIL(QS_ERR_FORMAT, "safetensors file '%s': tensors '%s' and '%s' overlap "
                           "(data_offsets begin %llu < previous end %llu)", f->path,
                           f->entries[i - 1].name, e->name, (unsigned long long)e->begin,
                           (unsigned long long)pos);
        if (e->begin > pos)
            return QS_FAIL(QS_ERR_FORMAT, "safetensors file '%s': bytes [%llu, %llu) before tensor '%s' "
                           "belong to no tensor (the format allows no holes)", f->path,
                           (unsigned long long)pos, (unsigned long long)e->begin, e->name);
        pos = e->end;
    }
    if (pos != f->data_size)
        return QS_FAIL(QS_ERR_FORMAT, "safetensors file '%s': the data buffer has %llu bytes but the "
                       "tensors cover %llu; the file has trailing garbage or a wrong header",
                       f->path, (unsigned long long)f->data_size, (unsigned long long)pos);
    return QS_OK;
}

/* The header's first byte, a JSON object's opening brace (spelt as a code: tools/sizes.py counts
 * braces). */
#define QS_ST_OPEN_BRACE 0x7B

/* Parse and validate the JSON header hdr[0..len). */
static qs_status qs_st_parse_header(qs_st_file *f, const char *hdr, size_t len) {
    if (len == 0 || hdr[0] != QS_ST_OPEN_BRACE)
        return QS_FAIL(QS_ERR_FORMAT, "safetensors file '%s': the header does not start with '%c'; "
                       "this is not a safetensors file", f->path, QS_ST_OPEN_BRACE);
    char *text = malloc(len + 1);
    if (!text) return QS_FAIL(QS_ERR_OOM, "safetensors file '%s': out of memory for the header", f->path);
    memcpy(text, hdr, len);
    text[len] = '\0';
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 0);
    bool ok = root && cJSON_IsObject(root) && end;
    for (const char *c = end; ok && c < text + len; c++)
        if (*c != ' ' && *c != '\t' && *c != '\n' && *c != '\r') ok = false;
    if (!ok) {
        size_t at = end && end >= text ? (size_t)(end - text) : 0;
        cJSON_Delete(root);
        free(text);
        return QS_FAIL(QS_ERR_FORMAT, "safetensors file '%s': the %zu-byte JSON header is malformed "
                       "(near byte %zu); the file is corrupt or not a safetensors file",
                       f->path, len, at);
    }
    int count = cJSON_GetArraySize(root);
    f->entries = calloc((size_t)count + 1, sizeof *f->entries);
    qs_status st = f->entries ? QS_OK : QS_FAIL(QS_ERR_OOM, "safetensors file '%s': out of memory", f->path);
    bool seen_meta = false;
    const cJSON *item;
    cJSON_ArrayForEach(item, root) {
        if (st != QS_OK) break;
        if (strcmp(item->string, "__metadata__") == 0) {
            if (seen_meta)
                st = QS_FAIL(QS_ERR_FORMAT, "safetensors file '%s': \"__metadata__\" appears twice", f->path);
            else
                st = qs_st_parse_meta(f, item);
            seen_meta = true;
            continue;
        }
        qs_st_entry *e = &f->entries[f->n];
        e->name = qs_st_strdup(item->string);
        if (!e->name) {
            st = QS_FAIL(QS_ERR_OOM, "safetensors file '%s': out of memory", f->path);
            break;
        }
        f->n++;
        st = qs_st_parse_entry(f, item, e);
    }
    cJSON_Delete(root);
    free(text);
    if (st == QS_OK) st = qs_st_index(f);
    return st;
}

qs_status qs_safetensors_open(const char *path, qs_st_file **out) {
    *out = NULL;
    qs_st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = qs_st_strdup(path))) {
        free(f);
        return QS_FAIL(QS_ERR_OOM, "opening '%s': out of memory", path);
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        qs_safetensors_close(f);
        return QS_FAIL(e == ENOENT ? QS_ERR_NOT_FOUND : QS_ERR_IO, "cannot open safetensors file '%s': %s",
                       path, strerror(e));
    }
    struct stat sb;
    qs_status st = QS_OK;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = QS_FAIL(QS_ERR_IO, "safetensors file '%s' is not a readable regular file", path);
    } else if (sb.st_size < 8) {
        st = QS_FAIL(QS_ERR_FORMAT, "safetensors file '%s' has %lld bytes, fewer than the 8-byte header "
                     "length; the file is truncated", path, (long long)sb.st_size);
    } else {
        f->map_size = (size_t)sb.st_size;
        void *m = mmap(NULL, f->map_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            st = QS_FAIL(QS_ERR_IO, "cannot map safetensors file '%s': %s", path, strerror(e));
        } else {
            f->map = m;
        }
    }
    close(fd);
    if (st == QS_OK) {
        uint64_t hlen = 0;
        for (int i = 0; i < 8; i++) hlen |= (uint64_t)f->map[i] << (8 * i);
        uint64_t avail = (uint64_t)f->map_size - 8;
        if (hlen > avail)
            st = QS_FAIL(QS_ERR_FORMAT, "safetensors file '%s': header length %llu exceeds the %llu bytes "
                         "after it; the file is truncated or not a safetensors file", path,
                         (unsigned long long)hlen, (unsigned long long)avail);
        else if (hlen > QS_ST_MAX_HEADER)
            st = QS_FAIL(QS_ERR_FORMAT, "safetensors file '%s': header length %llu exceeds the limit of %u",
                         path, (unsigned long long)hlen, QS_ST_MAX_HEADER);
        if (st == QS_OK) {
            f->data = f->map + 8 + hlen;
            f->data_size = avail - hlen;
            st = qs_st_parse_header(f, (const char *)f->map + 8, (size_t)hlen);
        }
    }
    if (st != QS_OK) {
        qs_safetensors_close(f);
        return st;
    }
    *out = f;
    return QS_OK;
}

int qs_safetensors_count(const qs_st_file *f) { return f->n; }

const char *qs_safetensors_name_at(const qs_st_file *f, int i) {
    return i >= 0 && i < f->n ? f->entries[i].name : NULL;
}

static const qs_st_entry *qs_st_find(const qs_st_file *f, const char *name) {
    int lo = 0, hi = f->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const qs_st_entry *e = &f->entries[f->by_name[mid].index];
        int c = strcmp(name, e->name);
        if (c == 0) return e;
        if (c < 0)
            hi = mid - 1;
        else
            lo = mid + 1;
    }
    return NULL;
}

qs_status qs_safetensors_get(const qs_st_file *f, const char *name, qs_st_tensor *out) {
    const qs_st_entry *e = qs_st_find(f, name);
    if (!e)
        return QS_FAIL(QS_ERR_NOT_FOUND, "safetensors file '%s' has no tensor named '%s'", f->path, name);
    memset(out, 0, sizeof *out);
    out->name = e->name;
    out->dtype = e->dtype;
    out->ndim = e->ndim;
    for (int i = 0; i < e->ndim; i++) out->shape[i] = e->shape[i];
    out->data = f->data + e->begin;
    return QS_OK;
}

qs_status qs_safetensors_lookup(void *file, const char *name, qs_tensor *out) {
    qs_st_tensor t;
    QS_TRY(qs_safetensors_get(file, name, &t));
    *out = qs_tensor_view((void *)t.data, t.dtype, t.ndim, t.shape);
    return QS_OK;
}

const char *qs_safetensors_meta(const qs_st_file *f, const char *key) {
    for (int i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_values[i];
    return NULL;
}

const char *qs_safetensors_path(const qs_st_file *f) { return f->path; }
