/* bench/cuda/kernel_trace.c — GPU time per kernel of any CUDA program, CUDA graph replays
 * included, through CUPTI's activity API (no synchronisation added between kernels).
 *
 * Built as the shared library libqs_kernel_trace.so and loaded by the CUDA driver's injection
 * hook into an unmodified process:
 *   CUDA_INJECTION64_PATH=/path/libqs_kernel_trace.so QS_KERNEL_TRACE_OUT=trace.json  program ...
 * At exit it writes (temp file + rename) one JSON object:
 *   {"format": "qsync-kernel-trace", "records": R, "dropped": D, "busy_ns": B, "span_ns": S,
 *    "kernels": [{"name": mangled name, "count": n, "total_ns": t}, ...]}   (largest total first)
 * Memory copies and sets count as the pseudo-kernels "[memcpy]" and "[memset]". busy_ns is the
 * sum of all durations (kernels of one stream do not overlap; with several streams it may
 * exceed span_ns, the time from the first start to the last end).
 * A per-step figure comes from two runs of different step counts: (total(n2) - total(n1)) /
 * (n2 - n1) cancels set-up, warm-up and capture (bench/kernel_diff.py does that). */
#include <cupti.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRACE_BUF_BYTES ((size_t)8 << 20)
#define TRACE_ALIGN 8
#define TRACE_SLOTS 8192 /* distinct kernel names kept (open addressing, power of two) */

typedef struct trace_entry {
    char *name;
    uint64_t count, total_ns;
} trace_entry;

static trace_entry g_entries[TRACE_SLOTS];
static uint64_t g_records, g_dropped, g_busy_ns, g_first_ns = UINT64_MAX, g_last_ns;
static int g_overflow; /* a name found no free slot */

/* FNV-1a hash of a NUL-terminated string. */
static uint64_t hash_name(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Adds one activity of [start, end) ns under name. */
static void account(const char *name, uint64_t start, uint64_t end) {
    if (!name) name = "[unnamed]";
    const uint64_t dur = end > start ? end - start : 0;
    g_records++;
    g_busy_ns += dur;
    if (start < g_first_ns) g_first_ns = start;
    if (end > g_last_ns) g_last_ns = end;
    for (uint64_t i = hash_name(name), probes = 0; probes < TRACE_SLOTS; i++, probes++) {
        trace_entry *e = &g_entries[i & (TRACE_SLOTS - 1)];
        if (!e->name) {
            e->name = strdup(name);
            if (!e->name) break;
        } else if (strcmp(e->name, name) != 0) {
            continue;
        }
        e->count++;
        e->total_ns += dur;
        return;
    }
    g_overflow = 1;
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = aligned_alloc(TRACE_ALIGN, TRACE_BUF_BYTES);
    *size = *buffer ? TRACE_BUF_BYTES : 0;
    *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t *buffer, size_t size,
                                      size_t valid) {
    (void)ctx;
    (void)stream_id;
    (void)size;
    CUpti_Activity *rec = NULL;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        switch (rec->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
            const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
            account(k->name, k->start, k->end);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
            const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)rec;
            account("[memcpy]", m->start, m->end);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
            const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)rec;
            account("[memset]", m->start, m->end);
            break;
        }
        default:
            break;
        }
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream_id, &dropped) == CUPTI_SUCCESS) g_dropped += dropped;
    free(buffer);
}

/* qsort order: largest total first, then by name. */
static int by_total_desc(const void *a, const void *b) {
    const trace_entry *x = *(trace_entry *const *)a, *y = *(trace_entry *const *)b;
    if (x->total_ns != y->total_ns) return x->total_ns < y->total_ns ? 1 : -1;
    return strcmp(x->name, y->name);
}

/* Writes s as a JSON string (names are C++ symbols: printable ASCII, escaped defensively). */
static void put_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        const unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

/* Flushes CUPTI and writes the JSON to QS_KERNEL_TRACE_OUT (stderr without it). */
static void write_report(void) {
    cuptiActivityFlushAll(1);
    trace_entry *order[TRACE_SLOTS];
    size_t n = 0;
    for (size_t i = 0; i < TRACE_SLOTS; i++)
        if (g_entries[i].name) order[n++] = &g_entries[i];
    qsort(order, n, sizeof order[0], by_total_desc);

    const char *path = getenv("QS_KERNEL_TRACE_OUT");
    char tmp[4096];
    FILE *f = stderr;
    if (path && *path) {
        if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp || !(f = fopen(tmp, "w"))) {
            fprintf(stderr, "kernel_trace: cannot write %s\n", path);
            return;
        }
    }
    fprintf(f, "{\"format\": \"qsync-kernel-trace\", \"records\": %llu, \"dropped\": %llu, \"overflow\": %s, ",
            (unsigned long long)g_records, (unsigned long long)g_dropped, g_overflow ? "true" : "false");
    fprintf(f, "\"busy_ns\": %llu, \"span_ns\": %llu, \"kernels\": [", (unsigned long long)g_busy_ns,
            (unsigned long long)(g_last_ns > g_first_ns ? g_last_ns - g_first_ns : 0));
    for (size_t i = 0; i < n; i++) {
        fprintf(f, "%s\n {\"name\": ", i ? "," : "");
        put_json_string(f, order[i]->name);
        fprintf(f, ", \"count\": %llu, \"total_ns\": %llu}", (unsigned long long)order[i]->count,
                (unsigned long long)order[i]->total_ns);
    }
    fprintf(f, "]}\n");
    if (f != stderr) {
        const int bad = ferror(f) | fflush(f) | fclose(f);
        if (bad || rename(tmp, path) != 0) fprintf(stderr, "kernel_trace: cannot write %s\n", path);
    }
}

/* The CUDA driver calls this once when it loads the library named by CUDA_INJECTION64_PATH.
 * Returns 1 on success (the driver ignores the value). */
int InitializeInjection(void);
int InitializeInjection(void) {
    const CUpti_ActivityKind kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                        CUPTI_ACTIVITY_KIND_MEMSET};
    if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) {
        fprintf(stderr, "kernel_trace: cuptiActivityRegisterCallbacks failed\n");
        return 0;
    }
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        const CUptiResult r = cuptiActivityEnable(kinds[i]);
        if (r != CUPTI_SUCCESS) {
            const char *msg = NULL;
            cuptiGetResultString(r, &msg);
            fprintf(stderr, "kernel_trace: cuptiActivityEnable(%d): %s\n", (int)kinds[i], msg ? msg : "?");
            return 0;
        }
    }
    atexit(write_report);
    return 1;
}
