/* src/dist/cluster.c — cluster files (see cluster.h). */
#include "dist/cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json_doc.h"
#include "qsync/dtype.h"

#define QS_CLUSTER_MAX_BYTES (1u << 20)

/* Copy the string at obj[key] (optional when !required) into buf. */
static qs_status get_str(const qs_cluster *c, const cJSON *obj, const char *key, int i, bool required, char *buf,
                         size_t cap) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) {
        if (required)
            return QS_FAIL(QS_ERR_FORMAT, "cluster %s: workers[%d] lacks \"%s\"", c->origin, i, key);
        return QS_OK;
    }
    if (!cJSON_IsString(v) || strlen(v->valuestring) >= cap || !v->valuestring[0])
        return QS_FAIL(QS_ERR_FORMAT, "cluster %s: workers[%d].%s must be a non-empty string of at most %zu characters",
                       c->origin, i, key, cap - 1);
    snprintf(buf, cap, "%s", v->valuestring);
    return QS_OK;
}

/* A number at obj[key] within [lo, hi] (optional; *out keeps its default when absent). */
static qs_status get_num(const qs_cluster *c, const cJSON *obj, const char *path, const char *key, int i, double lo,
                         double hi, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) return QS_OK;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi))
        return QS_FAIL(QS_ERR_FORMAT, "cluster %s: workers[%d].%s%s must be a number in [%g, %g]", c->origin, i, path,
                       key, lo, hi);
    *out = v->valuedouble;
    return QS_OK;
}

/* Keys of obj must all be in `allowed` (NULL-terminated). */
static qs_status only_keys(const qs_cluster *c, const cJSON *obj, const char *where, const char *const *allowed) {
    for (const cJSON *k = obj->child; k; k = k->next) {
        bool ok = false;
        for (int a = 0; allowed[a] && !ok; a++) ok = strcmp(k->string, allowed[a]) == 0;
        if (!ok) return QS_FAIL(QS_ERR_FORMAT, "cluster %s: unknown key \"%s\" in %s", c->origin, k->string, where);
    }
    return QS_OK;
}

static qs_status parse_worker(qs_cluster *c, const cJSON *w, int i, qs_cluster_worker *out) {
    char where[48];
    snprintf(where, sizeof where, "workers[%d]", i);
    if (!cJSON_IsObject(w)) return QS_FAIL(QS_ERR_FORMAT, "cluster %s: %s must be an object", c->origin, where);
    static const char *const keys[] = {"device", "type", "threads", "memory_mb", "precision", "plan", "emulation",
                                       "comment", NULL};
    QS_TRY(only_keys(c, w, where, keys));
    memset(out, 0, sizeof *out);
    out->slowdown = 1;
    snprintf(out->emulation_method, sizeof out->emulation_method, "auto");
    out->calibration_steps = QS_CLUSTER_DEFAULT_CALIBRATION_STEPS;
    QS_TRY(get_str(c, w, "device", i, true, out->device, sizeof out->device));
    if (strcmp(out->device, "cpu") != 0)
        return QS_FAIL(QS_ERR_UNSUPPORTED, "cluster %s: workers[%d].device \"%s\": this build runs on \"cpu\" only",
                       c->origin, i, out->device);
    QS_TRY(get_str(c, w, "type", i, true, out->type, sizeof out->type));
    QS_TRY(get_str(c, w, "precision", i, false, out->precision, sizeof out->precision));
    char plan[2048] = "";
    QS_TRY(get_str(c, w, "plan", i, false, plan, sizeof plan));
    if (out->precision[0] && plan[0])
        return QS_FAIL(QS_ERR_FORMAT, "cluster %s: workers[%d] gives both \"precision\" and \"plan\": use one", c->origin,
                       i);
    qs_precision p;
    if (out->precision[0] && !qs_precision_parse(out->precision, &p))
        return QS_FAIL(QS_ERR_FORMAT, "cluster %s: workers[%d].precision \"%s\" is not one of fp32, tf32, bf16, fp16, "
                       "fp8, int8", c->origin, i, out->precision);
    if (plan[0]) { /* relative to the cluster file's directory */
        const char *slash = strrchr(c->origin, '/');
        if (plan[0] == '/' || !slash) snprintf(out->plan, sizeof out->plan, "%s", plan);
        else snprintf(out->plan, sizeof out->plan, "%.*s/%s", (int)(slash - c->origin), c->origin, plan);
    }
    double threads = 0, mem = 0;
    QS_TRY(get_num(c, w, "", "threads", i, 0, 1024, &threads));
    QS_TRY(get_num(c, w, "", "memory_mb", i, 0, 1e9, &mem));
    out->threads = (int)threads;
    out->memory_mb = (int64_t)mem;
    const cJSON *emu = cJSON_GetObjectItemCaseSensitive(w, "emulation");
    if (emu) {
        snprintf(where, sizeof where, "workers[%d].emulation", i);
        if (!cJSON_IsObject(emu)) return QS_FAIL(QS_ERR_FORMAT, "cluster %s: %s must be an object", c->origin, where);
        static const char *const ekeys[] = {"slowdown", "method", "calibration_steps", NULL};
        QS_TRY(only_keys(c, emu, where, ekeys));
        QS_TRY(get_num(c, emu, "emulation.", "slowdown", i, 1, 100, &out->slowdown));
        double calib = QS_CLUSTER_DEFAULT_CALIBRATION_STEPS;
        QS_TRY(get_num(c, emu, "emulation.", "calibration_steps", i, 0, 1e6, &calib));
        if (calib != (double)(int64_t)calib)
            return QS_FAIL(QS_ERR_FORMAT, "cluster %s: workers[%d].emulation.calibration_steps must be a whole number",
                           c->origin, i);
        out->calibration_steps = (int64_t)calib;
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(emu, "method");
        if (m && !(cJSON_IsString(m) && (strcmp(m->valuestring, "auto") == 0 || strcmp(m->valuestring, "cgroup") == 0 ||
                                         strcmp(m->valuestring, "duty-cycle") == 0)))
            return QS_FAIL(QS_ERR_FORMAT, "cluster %s: workers[%d].emulation.method must be \"auto\", \"cgroup\" or "
                           "\"duty-cycle\"", c->origin, i);
        if (m) snprintf(out->emulation_method, sizeof out->emulation_method, "%s", m->valuestring);
    }
    return QS_OK;
}

qs_status qs_cluster_read(const char *path, qs_cluster *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->origin, sizeof out->origin, "%s", path);
    cJSON *root = NULL;
    QS_TRY(qs_json_read(path, QS_CLUSTER_MAX_BYTES, "cluster", &root));
    qs_status st = QS_OK;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format"),
                *ver = cJSON_GetObjectItemCaseSensitive(root, "version"),
                *ws = cJSON_GetObjectItemCaseSensitive(root, "workers");
    static const char *const keys[] = {"format", "version", "workers", "comment", NULL};
    if (!cJSON_IsObject(root)) st = QS_FAIL(QS_ERR_FORMAT, "cluster %s: the document must be a JSON object", path);
    if (st == QS_OK) st = only_keys(out, root, "the top level", keys);
    if (st == QS_OK && !(cJSON_IsString(fmt) && strcmp(fmt->valuestring, "qsync-cluster") == 0))
        st = QS_FAIL(QS_ERR_FORMAT, "cluster %s: \"format\" must be \"qsync-cluster\"", path);
    if (st == QS_OK && !(cJSON_IsNumber(ver) && ver->valuedouble == 1))
        st = QS_FAIL(QS_ERR_FORMAT, "cluster %s: \"version\" must be 1 (the only version this build reads)", path);
    int n = cJSON_IsArray(ws) ? cJSON_GetArraySize(ws) : 0;
    if (st == QS_OK && (n < 1 || n > QS_CLUSTER_MAX_WORKERS))
        st = QS_FAIL(QS_ERR_FORMAT, "cluster %s: \"workers\" must be an array of 1 to %d worker objects", path,
                     QS_CLUSTER_MAX_WORKERS);
    if (st == QS_OK && !(out->workers = calloc((size_t)n, sizeof *out->workers)))
        st = QS_FAIL(QS_ERR_OOM, "cluster %s: out of memory", path);
    for (int i = 0; st == QS_OK && i < n; i++) st = parse_worker(out, cJSON_GetArrayItem(ws, i), i, &out->workers[i]);
    cJSON_Delete(root);
    if (st != QS_OK) {
        qs_cluster_free(out);
        return st;
    }
    out->n_workers = n;
    return QS_OK;
}

void qs_cluster_free(qs_cluster *c) {
    free(c->workers);
    c->workers = NULL;
    c->n_workers = 0;
}

qs_status qs_cluster_worker_for(const qs_cluster *c, int rank, int world, const qs_cluster_worker **out) {
    if (c->n_workers != world)
        return QS_FAIL(QS_ERR_MISMATCH,
                       "cluster %s describes %d worker(s) but the job has %d rank(s): start it with mpirun -np %d "
                       "(rank i takes workers[i])",
                       c->origin, c->n_workers, world, c->n_workers);
    *out = &c->workers[rank];
    return QS_OK;
}
