/* src/data/loader.c — sharded, deterministic, resumable batch loader. Epoch e visits the dataset
 * in the order perm_e (Philox shuffle keyed by (seed, e), or identity); global batch b of epoch e
 * covers positions [b·B, (b+1)·B) of that order, and rank r takes the contiguous slice
 * [off_r, off_r + local_r) of it. Nothing depends on history, so a position is just (e, b).
 * Text samples are token ids handed over as floats; a token stream's sample i is window i. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/dataset.h"
#include "qsync/rng.h"

qs_status qs_loader_init(qs_loader *ld, const qs_dataset *ds, const qs_loader_options *opt) {
    if (!ld) return QS_FAIL(QS_ERR_INVALID_ARG, "qs_loader_init: loader is NULL");
    memset(ld, 0, sizeof *ld);
    if (!ds || !opt) return QS_FAIL(QS_ERR_INVALID_ARG, "qs_loader_init: dataset or options is NULL");
    const bool text = ds->raw_bytes || ds->tokens;
    if (ds->n < 1 || ds->h < 1 || ds->w < 1 || ds->c < 1 || ds->label_len < 1 ||
        (!text && ds->c > QS_DATASET_MAX_CHANNELS) ||
        (ds->tokens ? (!ds->raw_bytes || ds->h != 1 || ds->w != 1 || ds->label_len != ds->c ||
                       ds->n_tokens < ds->n * ds->c + 1)
                    : (!ds->pixels || !ds->labels)))
        return QS_FAIL(QS_ERR_INVALID_ARG, "qs_loader_init: dataset '%s' is empty or has an invalid shape (%lld×%lld×%lld×%lld, "
                       "%lld labels per sample%s)", ds->name, (long long)ds->n, (long long)ds->h, (long long)ds->w,
                       (long long)ds->c, (long long)ds->label_len, ds->tokens ? ", token stream" : "");
    if (opt->world < 1 || opt->rank < 0 || opt->rank >= opt->world)
        return QS_FAIL(QS_ERR_INVALID_ARG, "qs_loader_init: rank %d outside a world of %d ranks", opt->rank, opt->world);
    if (opt->global_batch < opt->world)
        return QS_FAIL(QS_ERR_INVALID_ARG,
                       "global batch %lld is smaller than the world size %d: every rank needs at least one sample per "
                       "step; raise --batch",
                       (long long)opt->global_batch, opt->world);
    if (opt->drop_last && ds->n < opt->global_batch)
        return QS_FAIL(QS_ERR_INVALID_ARG,
                       "dataset '%s' has %lld samples, fewer than one global batch of %lld with drop_last, so an epoch "
                       "would have no steps; lower --batch",
                       ds->name, (long long)ds->n, (long long)opt->global_batch);
    if (opt->augment && text)
        return QS_FAIL(QS_ERR_INVALID_ARG, "dataset '%s' holds token sequences: augmentation (random crop and horizontal "
                       "flip) applies to images only; train without --augment", ds->name);
    if (opt->augment && (opt->crop_pad < 0 || opt->crop_pad > ds->h || opt->crop_pad > ds->w))
        return QS_FAIL(QS_ERR_INVALID_ARG, "crop padding %lld must be in 0..min(h, w) = 0..%lld", (long long)opt->crop_pad,
                       (long long)(ds->h < ds->w ? ds->h : ds->w));
    for (int64_t ch = 0; !text && ch < ds->c; ch++) {
        if (!(ds->std[ch] > 0) || !isfinite(ds->std[ch]) || !isfinite(ds->mean[ch]))
            return QS_FAIL(QS_ERR_INVALID_ARG, "dataset '%s': channel %lld normalisation mean %g std %g is invalid (std must be > 0)",
                           ds->name, (long long)ch, (double)ds->mean[ch], (double)ds->std[ch]);
        for (int v = 0; v < 256; v++) ld->lut[ch][v] = (float)((v / 255.0 - ds->mean[ch]) / ds->std[ch]);
    }
    ld->perm = malloc((size_t)ds->n * sizeof *ld->perm);
    if (!ld->perm) return QS_FAIL(QS_ERR_OOM, "qs_loader_init: cannot allocate a permutation of %lld", (long long)ds->n);
    ld->ds = ds;
    ld->opt = *opt;
    const int64_t B = opt->global_batch, W = opt->world, r = opt->rank;
    const int64_t base = B / W, rem = B % W;
    ld->local_batch = base + (r < rem ? 1 : 0);
    ld->local_offset = r * base + (r < rem ? r : rem);
    ld->steps = opt->drop_last ? ds->n / B : (ds->n + B - 1) / B;
    ld->perm_epoch = -1;
    return QS_OK;
}

void qs_loader_free(qs_loader *ld) {
    if (!ld) return;
    free(ld->perm);
    memset(ld, 0, sizeof *ld);
}

int64_t qs_loader_local_batch(const qs_loader *ld) { return ld->local_batch; }

qs_status qs_loader_set_slice(qs_loader *ld, int64_t offset, int64_t local) {
    if (local < 1 || offset < 0 || offset + local > ld->opt.global_batch)
        return QS_FAIL(QS_ERR_INVALID_ARG, "loader slice [%lld, %lld) is not a non-empty part of the global batch of %lld",
                       (long long)offset, (long long)(offset + local), (long long)ld->opt.global_batch);
    ld->local_offset = offset;
    ld->local_batch = local;
    return QS_OK;
}

int64_t qs_loader_steps_per_epoch(const qs_loader *ld) { return ld->steps; }

/* Make ld->perm the visiting order of `epoch`. */
static void build_perm(qs_loader *ld, int64_t epoch) {
    if (ld->perm_epoch == epoch) return;
    const int64_t n = ld->ds->n;
    for (int64_t i = 0; i < n; i++) ld->perm[i] = i;
    if (ld->opt.shuffle) {
        qs_rng r;
        qs_rng_init(&r, qs_rng_key(ld->opt.seed, "loader-shuffle", (uint64_t)epoch), 0);
        qs_rng_shuffle_i64(&r, ld->perm, n);
    }
    ld->perm_epoch = epoch;
}

/* Write dataset sample idx, normalised (text: token ids as floats), to dst (h*w*c floats). With
 * augmentation, one Philox block keyed by (seed, epoch) at counter idx gives the crop offsets and the flip, so the result
 * depends only on (seed, epoch, idx). Crop: pad by p with raw zeros, take the h×w window at
 * (dy, dx) in [0, 2p]²; then mirror horizontally when flip. */
static void write_sample(const qs_loader *ld, int64_t idx, uint64_t aug_key, float *dst) {
    const qs_dataset *ds = ld->ds;
    const int64_t h = ds->h, w = ds->w, c = ds->c, hwc = h * w * c;
    if (ds->tokens) { /* window idx of the stream */
        const uint16_t *t = ds->tokens + idx * c;
        for (int64_t i = 0; i < c; i++) dst[i] = (float)t[i];
        return;
    }
    const uint8_t *src = ds->pixels + idx * hwc;
    if (ds->raw_bytes) { /* token bytes, not normalised (augmentation is refused for text) */
        for (int64_t i = 0; i < hwc; i++) dst[i] = (float)src[i];
        return;
    }
    if (!ld->opt.augment) {
        if (c == 1) {
            const float *lut = ld->lut[0];
            for (int64_t i = 0; i < hwc; i++) dst[i] = lut[src[i]];
        } else {
            for (int64_t i = 0; i < hwc; i += c)
                for (int64_t ch = 0; ch < c; ch++) dst[i + ch] = ld->lut[ch][src[i + ch]];
        }
        return;
    }
    uint32_t rnd[4];
    qs_philox4x32(aug_key, 0, (uint64_t)idx, rnd);
    const int64_t p = ld->opt.crop_pad, span = 2 * p + 1;
    const int64_t oy = (int64_t)(rnd[0] % (uint32_t)span) - p, ox = (int64_t)(rnd[1] % (uint32_t)span) - p;
    const bool flip = rnd[2] & 1u;
    for (int64_t y = 0; y < h; y++) {
        const int64_t sy = y + oy;
        float *row = dst + y * w * c;
        for (int64_t x = 0; x < w; x++) {
            const int64_t sx = (flip ? w - 1 - x : x) + ox;
            const bool inside = sy >= 0 && sy < h && sx >= 0 && sx < w;
            const uint8_t *px = inside ? src + (sy * w + sx) * c : NULL;
            for (int64_t ch = 0; ch < c; ch++) row[x * c + ch] = ld->lut[ch][inside ? px[ch] : 0];
        }
    }
}

qs_status qs_loader_next(qs_loader *ld, float *x, int32_t *y, int64_t *valid, bool *epoch_start) {
    if (!ld || !ld->ds || !x || !y)
        return QS_FAIL(QS_ERR_INVALID_ARG, "qs_loader_next: uninitialised loader or NULL output buffer");
    if (ld->batch >= ld->steps) {
        ld->epoch++;
        ld->batch = 0;
    }
    build_perm(ld, ld->epoch);
    const qs_dataset *ds = ld->ds;
    const int64_t n = ds->n, local = ld->local_batch, hwc = ds->h * ds->w * ds->c, L = ds->label_len;
    const int64_t first = ld->batch * ld->opt.global_batch + ld->local_offset;
    const uint64_t aug_key = qs_rng_key(ld->opt.seed, "loader-augment", (uint64_t)ld->epoch);
    const int64_t *perm = ld->perm;
#pragma omp parallel for schedule(static) if (local * hwc >= (1 << 15))
    for (int64_t j = 0; j < local; j++) {
        const int64_t pos = first + j;
        const int64_t idx = perm[pos < n ? pos : n - 1]; /* eval padding repeats the last sample */
        if (ds->tokens) { /* the next token of every position */
            const uint16_t *t = ds->tokens + idx * hwc + 1;
            for (int64_t k = 0; k < L; k++) y[j * L + k] = t[k];
        } else {
            for (int64_t k = 0; k < L; k++) y[j * L + k] = ds->labels[idx * L + k];
        }
        write_sample(ld, idx, aug_key, x + j * hwc);
    }
    int64_t v = n - first;
    if (valid) *valid = v < 0 ? 0 : v > local ? local : v;
    if (epoch_start) *epoch_start = ld->batch == 0;
    ld->batch++;
    return QS_OK;
}

void qs_loader_get_position(const qs_loader *ld, int64_t *epoch, int64_t *batch_in_epoch) {
    /* After the last batch of an epoch the next batch is batch 0 of the next epoch. */
    bool done = ld->batch >= ld->steps;
    if (epoch) *epoch = done ? ld->epoch + 1 : ld->epoch;
    if (batch_in_epoch) *batch_in_epoch = done ? 0 : ld->batch;
}

qs_status qs_loader_set_position(qs_loader *ld, int64_t epoch, int64_t batch_in_epoch) {
    if (!ld || !ld->ds) return QS_FAIL(QS_ERR_INVALID_ARG, "qs_loader_set_position: uninitialised loader");
    if (epoch < 0 || batch_in_epoch < 0 || batch_in_epoch > ld->steps)
        return QS_FAIL(QS_ERR_INVALID_ARG,
                       "loader position (epoch %lld, batch %lld) is invalid: this loader has %lld batches per epoch; "
                       "was the checkpoint written with another dataset, batch size or drop_last setting?",
                       (long long)epoch, (long long)batch_in_epoch, (long long)ld->steps);
    ld->epoch = epoch;
    ld->batch = batch_in_epoch;
    return QS_OK;
}
