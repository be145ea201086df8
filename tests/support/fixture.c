/* tests/support/fixture.c — reader of the "QSFX" reference fixtures (format in fixture.h). */
#include "fixture.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "qsync/tensor.h"

const char *qs_fx_dtype_name(qs_fx_dtype dt) {
    switch (dt) {
    case QS_FX_F32: return "f32";
    case QS_FX_I32: return "i32";
    case QS_FX_I64: return "i64";
    }
    return "invalid";
}

size_t qs_fx_dtype_size(qs_fx_dtype dt) { return dt == QS_FX_I64 ? 8 : 4; }

static bool host_is_little_endian(void) {
    const uint16_t one = 1;
    return *(const uint8_t *)&one == 1;
}

static uint64_t read_le(const uint8_t *p, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* Cursor over the input with bounds checks; every failure names what was being read. */
typedef struct fx_cursor {
    const uint8_t *base;
    size_t size, pos;
    const char *path;
} fx_cursor;

static qs_status need(fx_cursor *c, size_t bytes, const char *what, const char *tensor) {
    if (bytes > c->size - c->pos)
        return QS_FAIL(QS_ERR_FORMAT,
                       "fixture %s: truncated at byte %zu reading %s%s%s (needs %zu bytes, %zu left)", c->path,
                       c->pos, what, tensor ? " of tensor " : "", tensor ? tensor : "", bytes, c->size - c->pos);
    return QS_OK;
}

void qs_fixture_free(qs_fixture *fx) {
    if (!fx) return;
    for (int i = 0; i < fx->count; i++) {
        free(fx->tensors[i].name);
        qs_host_free(fx->tensors[i].data);
    }
    free(fx->tensors);
    free(fx);
}

static qs_status parse_record(fx_cursor *c, qs_fixture *fx, int index, uint32_t count) {
    qs_fx_tensor *t = &fx->tensors[index];
    QS_TRY(need(c, 2, "the name length", NULL));
    size_t len = (size_t)read_le(c->base + c->pos, 2);
    if (len == 0)
        return QS_FAIL(QS_ERR_FORMAT, "fixture %s: tensor %d of %u at byte %zu has an empty name", c->path, index,
                       count, c->pos);
    c->pos += 2;
    QS_TRY(need(c, len, "the name", NULL));
    t->name = malloc(len + 1);
    if (!t->name) return QS_FAIL(QS_ERR_OOM, "fixture %s: out of memory", c->path);
    memcpy(t->name, c->base + c->pos, len);
    t->name[len] = '\0';
    if (strlen(t->name) != len)
        return QS_FAIL(QS_ERR_FORMAT, "fixture %s: tensor name at byte %zu contains a NUL byte", c->path, c->pos);
    c->pos += len;
    for (int j = 0; j < index; j++)
        if (strcmp(fx->tensors[j].name, t->name) == 0)
            return QS_FAIL(QS_ERR_FORMAT, "fixture %s: tensor name '%s' appears twice", c->path, t->name);
    QS_TRY(need(c, 2, "dtype and ndim", t->name));
    unsigned dt = c->base[c->pos], nd = c->base[c->pos + 1];
    if (dt > QS_FX_I64)
        return QS_FAIL(QS_ERR_FORMAT,
                       "fixture %s: tensor '%s' at byte %zu has unknown dtype code %u (0=f32, 1=i32, 2=i64)", c->path,
                       t->name, c->pos, dt);
    if (nd > QS_FX_MAX_DIMS)
        return QS_FAIL(QS_ERR_FORMAT, "fixture %s: tensor '%s' at byte %zu has %u dims (max %d)", c->path, t->name,
                       c->pos + 1, nd, QS_FX_MAX_DIMS);
    t->dtype = (qs_fx_dtype)dt;
    t->ndim = (int)nd;
    c->pos += 2;
    QS_TRY(need(c, 8 * (size_t)nd, "the shape", t->name));
    int64_t numel = 1;
    for (unsigned d = 0; d < nd; d++) {
        int64_t s = (int64_t)read_le(c->base + c->pos + 8 * d, 8);
        if (s < 0)
            return QS_FAIL(QS_ERR_FORMAT, "fixture %s: tensor '%s' has negative dimension %u (%lld)", c->path,
                           t->name, d, (long long)s);
        if (s > 0 && numel > (int64_t)(c->size / 4 + 1) / s)   /* more elements than the file could hold */
            return QS_FAIL(QS_ERR_FORMAT, "fixture %s: tensor '%s' has an impossible shape (dimension %u = %lld)",
                           c->path, t->name, d, (long long)s);
        t->shape[d] = s;
        numel *= s;
    }
    c->pos += 8 * (size_t)nd;
    t->numel = numel;
    size_t esz = qs_fx_dtype_size(t->dtype), bytes = (size_t)numel * esz;
    QS_TRY(need(c, bytes, "the data", t->name));
    t->data = qs_host_alloc(bytes);
    if (!t->data) return QS_FAIL(QS_ERR_OOM, "fixture %s: out of memory for tensor '%s'", c->path, t->name);
    if (host_is_little_endian()) {
        memcpy(t->data, c->base + c->pos, bytes);
    } else {
        for (size_t e = 0; e < (size_t)numel; e++) {
            uint64_t v = read_le(c->base + c->pos + e * esz, (int)esz);
            if (esz == 8) ((uint64_t *)t->data)[e] = v;
            else ((uint32_t *)t->data)[e] = (uint32_t)v;
        }
    }
    c->pos += bytes;
    return QS_OK;
}

qs_status qs_fixture_parse(const void *bytes, size_t size, const char *path, qs_fixture **out) {
    *out = NULL;
    fx_cursor c = {.base = bytes, .size = size, .pos = 0, .path = path};
    QS_TRY(need(&c, 12, "the header", NULL));
    if (memcmp(c.base, "QSFX", 4) != 0)
        return QS_FAIL(QS_ERR_FORMAT, "fixture %s: bad magic (expected \"QSFX\"): not a qsync fixture file", path);
    uint32_t version = (uint32_t)read_le(c.base + 4, 4), count = (uint32_t)read_le(c.base + 8, 4);
    if (version != 1)
        return QS_FAIL(QS_ERR_FORMAT, "fixture %s: format version %u, this reader knows version 1 "
                       "(regenerate with tools/gen_fixtures.py)", path, version);
    /* each record takes at least 5 bytes: a bound on count before allocating */
    if (count > (size - 12) / 5)
        return QS_FAIL(QS_ERR_FORMAT, "fixture %s: header claims %u tensors but the file has only %zu bytes",
                       path, count, size);
    c.pos = 12;
    qs_fixture *fx = calloc(1, sizeof *fx);
    if (!fx) return QS_FAIL(QS_ERR_OOM, "fixture %s: out of memory", path);
    snprintf(fx->path, sizeof fx->path, "%s", path);
    fx->tensors = calloc(count ? count : 1, sizeof *fx->tensors);
    if (!fx->tensors) {
        free(fx);
        return QS_FAIL(QS_ERR_OOM, "fixture %s: out of memory", path);
    }
    for (uint32_t i = 0; i < count; i++) {
        fx->count = (int)i + 1;   /* so that free releases the partial record too */
        qs_status st = parse_record(&c, fx, (int)i, count);
        if (st != QS_OK) {
            qs_fixture_free(fx);
            return st;
        }
    }
    if (c.pos != size) {
        qs_fixture_free(fx);
        return QS_FAIL(QS_ERR_FORMAT, "fixture %s: %zu trailing bytes after the last of %u tensors (at byte %zu)",
                       path, size - c.pos, count, c.pos);
    }
    *out = fx;
    return QS_OK;
}

qs_status qs_fixture_load(const char *path, qs_fixture **out) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return QS_FAIL(QS_ERR_IO, "fixture %s: cannot open: %s", path, strerror(errno));
    qs_status st = QS_OK;
    uint8_t *buf = NULL;
    long size = -1;
    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        st = QS_FAIL(QS_ERR_IO, "fixture %s: cannot determine the file size: %s", path, strerror(errno));
    } else if (!(buf = malloc(size ? (size_t)size : 1))) {
        st = QS_FAIL(QS_ERR_OOM, "fixture %s: out of memory reading %ld bytes", path, size);
    } else if (size > 0 && fread(buf, 1, (size_t)size, f) != (size_t)size) {
        st = QS_FAIL(QS_ERR_IO, "fixture %s: short read (%ld bytes expected)", path, size);
    }
    fclose(f);
    if (st == QS_OK) st = qs_fixture_parse(buf, (size_t)size, path, out);
    free(buf);
    return st;
}

const char *qs_fixture_dir(void) {
    const char *d = getenv("QS_FIXTURES");
    return d ? d : "tests/fixtures";
}

qs_status qs_fixture_open(const char *file, qs_fixture **out) {
    *out = NULL;
    const char *dir = getenv("QS_FIXTURES");
    if (!dir || !dir[0])
        return QS_FAIL(QS_ERR_NOT_FOUND, "fixture %s: QS_FIXTURES is not set (run through ctest, or export "
                       "QS_FIXTURES=<repo>/tests/fixtures)", file);
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    return qs_fixture_load(path, out);
}

const qs_fx_tensor *qs_fixture_find(const qs_fixture *fx, const char *name) {
    for (int i = 0; i < fx->count; i++)
        if (strcmp(fx->tensors[i].name, name) == 0) return &fx->tensors[i];
    return NULL;
}

qs_status qs_fixture_get(const qs_fixture *fx, const char *name, qs_fx_dtype dt, int ndim, const int64_t *shape,
                         int64_t numel_expect, const qs_fx_tensor **out) {
    *out = NULL;
    const qs_fx_tensor *t = qs_fixture_find(fx, name);
    if (!t) return QS_FAIL(QS_ERR_NOT_FOUND, "fixture %s: no tensor named '%s'", fx->path, name);
    if (t->dtype != dt)
        return QS_FAIL(QS_ERR_MISMATCH, "fixture %s: tensor '%s' is %s, expected %s", fx->path, name,
                       qs_fx_dtype_name(t->dtype), qs_fx_dtype_name(dt));
    char have[160];
    qs_shape_format(t->ndim, t->shape, have, sizeof have);
    if (shape && ndim >= 0) {
        bool same = t->ndim == ndim;
        for (int d = 0; same && d < ndim; d++) same = t->shape[d] == shape[d];
        if (!same) {
            char want[160];
            qs_shape_format(ndim, shape, want, sizeof want);
            return QS_FAIL(QS_ERR_MISMATCH, "fixture %s: tensor '%s' has shape %s, expected %s", fx->path, name,
                           have, want);
        }
    } else if (numel_expect >= 0 && t->numel != numel_expect) {
        return QS_FAIL(QS_ERR_MISMATCH, "fixture %s: tensor '%s' has shape %s (%lld elements), expected %lld elements",
                       fx->path, name, have, (long long)t->numel, (long long)numel_expect);
    }
    *out = t;
    return QS_OK;
}

const float *qs_fixture_f32(const qs_fixture *fx, const char *name, int64_t numel) {
    const qs_fx_tensor *t;
    if (qs_fixture_get(fx, name, QS_FX_F32, -1, NULL, numel, &t) != QS_OK) return NULL;
    return t->data;
}
