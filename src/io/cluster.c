/* src/io/cluster.c — defines: cluster files (see cluster.h). */
#include "io/cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json_doc.h"
#include "io/json_fields.h"
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

/* A whole number at obj[key] within [lo, hi] (optional; *out keeps its default when absent). */
static qs_status get_whole(const qs_cluster *c, const cJSON *obj, const char *path, const char *key, int i, double lo,
                           double hi, int64_t *out) {
    double v = (double)*out;
    QS_TRY(get_num(c, obj, path, key, i, lo, hi, &v));
    if (v != (double)(int64_t)v)
        return QS_FAIL(QS_ERR_FORMAT, "cluster %s: workers[%d].%s%s must be a whole number", c->origin, i, path, key);
    *out = (int64_t)v;
    return QS_OK;
}

/* Keys of obj must all be in `allowed` (NULL-terminated), each given once; "comment" a string. */
static qs_status only_keys(const qs_cluster *c, const cJSON *obj, const char *where, const char *const *allowed) {
    for (const cJSON *k = obj->child; k; k = k->next) {
        bool ok = false;
        for (int a = 0; allowed[a] && !ok; a++) ok = strcmp(k->string, allowed[a]) == 0;
        if (!ok) return QS_FAIL(QS_ERR_FORMAT, "cluster %s: unknown key \"%s\" in %s", c->origin, k->string, where);
        if (qs_jf_key_repeated(obj, k))
            return QS_FAIL(QS_ERR_FORMAT, "cluster %s: key \"%s\" appears twice in %s", c->origin, k->string, where);
        if (strcmp(k->string, "comment") == 0 && !cJSON_IsString(k))
            return QS_FAIL(QS_ERR_FORMAT, "cluster %s: \"comment\" in %s must be a string", c->origin, where);
    }
    return QS_OK;
}

/* workers[i].device: "cpu", "cuda" (= "cuda:0") or "cuda:N" (N ≥ 0, at most 9 digits) into
 * out->cuda and out->cuda_device; anything else is QS_ERR_FORMAT naming the accepted forms. */
static qs_status parse_device(const qs_cluster *c, int i, qs_cluster_worker *out) {
    const char *d = out->device;
    out->cuda = false;
    out->cuda_device = 0;
    if (strcmp(d, "cpu") == 0) return QS_OK;
    size_t n = strncmp(d, "cuda:", 5) == 0 ? strspn(d + 5, "0123456789") : 0;
    if (strcmp(d, "cuda") == 0 || (n >= 1 && n <= 9 && d[5 + n] == '\0')) {
        out->cuda = true;
        out->cuda_device = n ? atoi(d + 5) : 0;
        return QS_OK;
    }
    return QS_FAIL(QS_ERR_FORMAT, "cluster %s: workers[%d].device \"%s\" is not \"cpu\", \"cuda\" or \"cuda:N\" (N a "
                   "device index >= 0; \"cuda\" is \"cuda:0\")", c->origin, i, d);
}

/* workers[i].precision and .plan (at most one; the plan resolved against the cluster file's
 * directory). */
static qs_status parse_precisions(const qs_cluster *c, const cJSON *w, int i, qs_cluster_worker *out) {
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
    return QS_OK;
}

/* workers[i].emulation of a cpu worker: slowdown, method auto|cgroup|duty-cycle,
 * calibration_steps; sm_percent (an MPS SM share) is refused. */
static qs_status parse_cpu_emulation(const qs_cluster *c, const cJSON *emu, int i, qs_cluster_worker *out) {
    if (cJSON_GetObjectItemCaseSensitive(emu, "sm_count"))
        return QS_FAIL(QS_ERR_FORMAT, "cluster %s: workers[%d].emulation.sm_count is a GPU partition's SMs, for \"cuda\" "
                       "workers only; a cpu worker is made slower with emulation.slowdown", c->origin, i);
    if (cJSON_GetObjectItemCaseSensitive(emu, "sm_percent"))
        return QS_FAIL(QS_ERR_FORMAT, "cluster %s: workers[%d].emulation.sm_percent is an MPS SM share, for \"cuda\" "
                       "workers only; a cpu worker is made slower with emulation.slowdown", c->origin, i);
    QS_TRY(get_num(c, emu, "emulation.", "slowdown", i, 1, 100, &out->slowdown));
    QS_TRY(get_whole(c, emu, "emulation.", "calibration_steps", i, 0, 1e6, &out->calibration_steps));
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(emu, "method");
    if (m && !(cJSON_IsString(m) && (strcmp(m->valuestring, "auto") == 0 || strcmp(m->valuestring, "cgroup") == 0 ||
                                     strcmp(m->valuestring, "duty-cycle") == 0)))
        return QS_FAIL(QS_ERR_FORMAT, "cluster %s: workers[%d].emulation.method must be \"auto\", \"cgroup\" or "
                       "\"duty-cycle\" for a cpu worker (\"mps\" is for \"cuda\" workers)", c->origin, i);
    if (m) snprintf(out->emulation_method, sizeof out->emulation_method, "%s", m->valuestring);
    return QS_OK;
}

/* workers[i].emulation of a cuda worker: either sm_percent (1..100, method "mps") or sm_count
 * (1..4096 SMs, method "green-context"), not both; slowdown and calibration_steps are refused
 * (the limit holds from the CUDA context's creation: the slowdown it gives is measured against
 * other workers, never asked or calibrated in-rank). */
static qs_status parse_cuda_emulation(const qs_cluster *c, const cJSON *emu, int i, qs_cluster_worker *out) {
    if (cJSON_GetObjectItemCaseSensitive(emu, "slowdown"))
        return QS_FAIL(QS_ERR_FORMAT, "cluster %s: workers[%d].emulation.slowdown is for cpu workers: a \"cuda\" worker "
                       "is made weaker with emulation.sm_count (SMs of a green-context partition) or sm_percent (an "
                       "MPS SM share, 1 to 100); the slowdown it gives is measured, not asked", c->origin, i);
    if (cJSON_GetObjectItemCaseSensitive(emu, "calibration_steps"))
        return QS_FAIL(QS_ERR_FORMAT, "cluster %s: workers[%d].emulation.calibration_steps is for cpu workers: an SM "
                       "limit holds from the CUDA context's creation, so a \"cuda\" worker has no unslowed steps "
                       "to calibrate against", c->origin, i);
    const bool by_count = cJSON_GetObjectItemCaseSensitive(emu, "sm_count") != NULL;
    if (by_count && cJSON_GetObjectItemCaseSensitive(emu, "sm_percent"))
        return QS_FAIL(QS_ERR_FORMAT, "cluster %s: workers[%d].emulation has both sm_count and sm_percent: give one "
                       "(sm_count: a green-context partition of that many SMs; sm_percent: an MPS share)", c->origin, i);
    const char *want = by_count ? "green-context" : "mps";
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(emu, "method");
    if (m && !(cJSON_IsString(m) && strcmp(m->valuestring, want) == 0))
        return QS_FAIL(QS_ERR_FORMAT, "cluster %s: workers[%d].emulation.method must be \"%s\" for a \"cuda\" worker "
                       "with %s (\"auto\", \"cgroup\" and \"duty-cycle\" are for cpu workers)", c->origin, i, want,
                       by_count ? "sm_count" : "sm_percent");
    snprintf(out->emulation_method, sizeof out->emulation_method, "%s", want);
    int64_t sm = 0;
    if (by_count) {
        QS_TRY(get_whole(c, emu, "emulation.", "sm_count", i, 1, 4096, &sm));
        out->sm_count = (int)sm;
        return QS_OK;
    }
    QS_TRY(get_whole(c, emu, "emulation.", "sm_percent", i, 1, 100, &sm));
    out->sm_percent = (int)sm;
    return QS_OK;
}

/* Give the green-context partitions of each GPU consecutive SM ranges, in worker order. */
static void place_partitions(qs_cluster *c) {
    for (int i = 0; i < c->n_workers; i++) {
        qs_cluster_worker *w = &c->workers[i];
        if (!w->cuda || w->sm_count <= 0) continue;
        w->sm_offset = 0;
        for (int j = 0; j < i; j++)
            if (c->workers[j].cuda && c->workers[j].cuda_device == w->cuda_device) w->sm_offset += c->workers[j].sm_count;
    }
}

/* workers[i].emulation (optional), by the worker's device kind. */
static qs_status parse_emulation(const qs_cluster *c, const cJSON *w, int i, qs_cluster_worker *out) {
    const cJSON *emu = cJSON_GetObjectItemCaseSensitive(w, "emulation");
    if (!emu) return QS_OK;
    char where[48];
    snprintf(where, sizeof where, "workers[%d].emulation", i);
    if (!cJSON_IsObject(emu)) return QS_FAIL(QS_ERR_FORMAT, "cluster %s: %s must be an object", c->origin, where);
    static const char *const ekeys[] = {"slowdown", "method", "calibration_steps", "sm_percent", "sm_count",
                                        NULL};
    QS_TRY(only_keys(c, emu, where, ekeys));
    return out->cuda ? parse_cuda_emulation(c, emu, i, out) : parse_cpu_emulation(c, emu, i, out);
}

/* workers[i] into *out (every field set; defaults for the absent keys). */
static qs_status parse_worker(qs_cluster *c, const cJSON *w, int i, qs_cluster_worker *out) {
    char where[48];
    snprintf(where, sizeof where, "workers[%d]", i);
    if (!cJSON_IsObject(w)) return QS_FAIL(QS_ERR_FORMAT, "cluster %s: %s must be an object", c->origin, where);
    static const char *const keys[] = {"device", "type", "threads", "memory_mb", "precision", "plan", "emulation",
                                       "comment", NULL};
    QS_TRY(only_keys(c, w, where, keys));
    memset(out, 0, sizeof *out);
    out->slowdown = 1;
    QS_TRY(get_str(c, w, "device", i, true, out->device, sizeof out->device));
    QS_TRY(parse_device(c, i, out));
    /* cuda workers: MPS unless emulation.sm_count asks a green context, and no in-rank
     * calibration window (see parse_cuda_emulation) */
    snprintf(out->emulation_method, sizeof out->emulation_method, "%s", out->cuda ? "mps" : "auto");
    out->calibration_steps = out->cuda ? 0 : QS_CLUSTER_DEFAULT_CALIBRATION_STEPS;
    QS_TRY(get_str(c, w, "type", i, true, out->type, sizeof out->type));
    QS_TRY(parse_precisions(c, w, i, out));
    int64_t threads = 0;
    QS_TRY(get_whole(c, w, "", "threads", i, 0, 1024, &threads));
    QS_TRY(get_whole(c, w, "", "memory_mb", i, 0, 1e9, &out->memory_mb));
    out->threads = (int)threads;
    return parse_emulation(c, w, i, out);
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
    place_partitions(out);
    return QS_OK;
}

qs_status qs_cluster_check_devices(const qs_cluster *c) {
    for (int i = 1; i < c->n_workers; i++) {
        const qs_cluster_worker *a = &c->workers[0], *b = &c->workers[i];
        if (a->cuda != b->cuda)
            return QS_FAIL(QS_ERR_UNSUPPORTED, "cluster %s: worker 0 is on %s and worker %d on %s: one job runs on CPUs "
                           "or on a GPU, not on both", c->origin, a->device, i, b->device);
    }
    /* GPUs: all workers on one (CUDA IPC) or each on its own (NCCL); not a mix of both */
    if (c->n_workers == 0 || !c->workers[0].cuda) return QS_OK;
    int gpus = 0, pair_i = -1, pair_j = -1;
    for (int i = 0; i < c->n_workers; i++) {
        int first = i;
        for (int j = 0; j < i && first == i; j++)
            if (c->workers[j].cuda_device == c->workers[i].cuda_device) first = j;
        if (first == i) gpus++;
        else if (pair_i < 0) pair_i = first, pair_j = i;
    }
    if (gpus > 1 && pair_i >= 0)
        return QS_FAIL(QS_ERR_UNSUPPORTED, "cluster %s: workers %d and %d share cuda:%d while others are on other GPUs: "
                       "that needs CUDA IPC within a GPU and NCCL between GPUs (hierarchical), which this qsync does not "
                       "have; put every worker on its own GPU or all on one", c->origin, pair_i, pair_j,
                       c->workers[pair_i].cuda_device);
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
