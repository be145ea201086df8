/* src/data/idx.c — Fashion-MNIST in IDX format (LeCun's MNIST layout, also used by Zalando's
 * Fashion-MNIST): a 4-byte magic (0, 0, type 0x08 = unsigned byte, number of dims), the dims as
 * big-endian uint32, then the row-major payload. gzip or plain files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/datafile.h"
#include "data/readers.h"

#define FMNIST_DEFAULT_DIR "/usr/share/datasets/fashion-mnist"
#define FMNIST_HINT                                                                                   \
    "install the Debian package dataset-fashion-mnist (apt-get install dataset-fashion-mnist) or pass " \
    "--data-dir with a folder holding {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]"
#define FMNIST_CLASSES 10
#define IDX_MAX_PAYLOAD ((int64_t)1 << 36) /* 64 GiB */

/* Normalisation constants for Fashion-MNIST: the widely used (0.2860, 0.3530) (e.g. torchvision
 * examples and many papers), i.e. the mean and standard deviation of p/255 over all 47,040,000
 * pixels of the 60,000 training images. Measured here with qs_dataset_channel_stats on
 * /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz: mean 0.286041, std 0.353024
 * (population std over pixels; checked again by tests/test_data.c). */
#define FMNIST_MEAN 0.2860f
#define FMNIST_STD 0.3530f

static uint32_t be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

/* The "data ends at byte `end` (header + payload offsets)" error; `kind` says file or stream. */
static qs_status idx_truncated(const char *path, const char *what, int ndims, const int64_t dims[3], int64_t hlen,
                               int64_t end, const char *kind) {
    int64_t rec = ndims == 1 ? 1 : dims[1] * dims[2], total = dims[0] * rec;
    return QS_FAIL(QS_ERR_FORMAT,
                   "%s: truncated: the header declares %lld %s (%lld payload bytes) but the %s ends at byte offset "
                   "%lld, inside record %lld; the file is incomplete — download or install it again",
                   path, (long long)dims[0], what, (long long)total, kind, (long long)end,
                   (long long)((end - hlen) / rec));
}

/* Read a whole unsigned-byte IDX file with `ndims` dims (1 for labels, 3 for images) from path.
 * On success dims[0..ndims) hold the dims and *data (malloc'd, caller frees) the payload of
 * prod(dims) bytes. Bad magic, implausible dims, truncation and trailing bytes → QS_ERR_FORMAT. */
static qs_status idx_read_u8(const char *path, int ndims, const char *what, int64_t dims[3], uint8_t **data) {
    *data = NULL;
    qs_datafile f;
    qs_status st = qs_datafile_open(&f, path, FMNIST_HINT);
    if (st != QS_OK) return st;
    uint8_t hdr[16];
    int64_t hlen = 4 + 4 * (int64_t)ndims, got = 0;
    uint8_t *buf = NULL;
    if ((st = qs_datafile_read(&f, hdr, hlen, &got)) != QS_OK) goto fail;
    if (got < 4) {
        st = QS_FAIL(QS_ERR_FORMAT, "%s: truncated: %lld bytes, too short for an IDX header; expected an IDX %s file",
                     path, (long long)got, what);
        goto fail;
    }
    uint32_t magic = be32(hdr), want = 0x00000800u | (uint32_t)ndims;
    if (magic != want) {
        st = QS_FAIL(QS_ERR_FORMAT,
                     "%s: bad magic 0x%08x at byte offset 0, expected 0x%08x (IDX %s file: unsigned bytes, %d dims); "
                     "is this the right file?",
                     path, magic, want, what, ndims);
        goto fail;
    }
    if (got < hlen) {
        st = QS_FAIL(QS_ERR_FORMAT, "%s: truncated in the header: file ends at byte offset %lld, header needs %lld bytes",
                     path, (long long)got, (long long)hlen);
        goto fail;
    }
    int64_t total = 1;
    for (int d = 0; d < ndims; d++) {
        dims[d] = be32(hdr + 4 + 4 * d);
        /* sample count below 2^31, image side up to 2^16: far above any IDX dataset */
        int64_t lim = d == 0 ? ((int64_t)1 << 31) - 1 : (int64_t)1 << 16;
        if (dims[d] < 1 || dims[d] > lim) {
            st = QS_FAIL(QS_ERR_FORMAT, "%s: implausible dimension %d = %lld at byte offset %d (allowed 1..%lld)", path,
                         d, (long long)dims[d], 4 + 4 * d, (long long)lim);
            goto fail;
        }
        total *= dims[d];
    }
    if (total > IDX_MAX_PAYLOAD) {
        st = QS_FAIL(QS_ERR_FORMAT, "%s: the header declares %lld bytes of %s, more than the %lld-byte limit; is the header corrupt?",
                     path, (long long)total, what, (long long)IDX_MAX_PAYLOAD);
        goto fail;
    }
    struct stat sb;
    if (qs_datafile_is_plain(&f) && stat(path, &sb) == 0 && (int64_t)sb.st_size < hlen + total) {
        /* a plain file's size is known: refuse before allocating for a header that lies */
        st = idx_truncated(path, what, ndims, dims, hlen, (int64_t)sb.st_size, "file");
        goto fail;
    }
    buf = malloc((size_t)total + 1);
    if (!buf) {
        st = QS_FAIL(QS_ERR_OOM, "%s: cannot allocate %lld bytes for the payload", path, (long long)total);
        goto fail;
    }
    if ((st = qs_datafile_read(&f, buf, total, &got)) != QS_OK) goto fail;
    if (got < total) {
        st = idx_truncated(path, what, ndims, dims, hlen, hlen + got,
                           qs_datafile_is_plain(&f) ? "file" : "decompressed data");
        goto fail;
    }
    /* One more byte: detects a header count smaller than the data and makes zlib verify the
     * gzip trailer (CRC and length). */
    uint8_t extra;
    if ((st = qs_datafile_read(&f, &extra, 1, &got)) != QS_OK) goto fail;
    if (got != 0) {
        st = QS_FAIL(QS_ERR_FORMAT,
                     "%s: trailing data after byte offset %lld: the header declares %lld %s but the file is longer; "
                     "the header count is wrong or the file is corrupt",
                     path, (long long)(hlen + total), (long long)dims[0], what);
        goto fail;
    }
    qs_datafile_close(&f);
    *data = buf;
    return QS_OK;
fail:
    free(buf);
    qs_datafile_close(&f);
    return st;
}

/* path of dir/base.gz if it exists, else dir/base (which may not exist: the open then reports it). */
static qs_status fmnist_path(char out[QS_DATA_PATH_MAX], const char *dir, const char *base) {
    char gzname[128];
    snprintf(gzname, sizeof gzname, "%s.gz", base);
    QS_TRY(qs_data_join(out, dir, gzname));
    if (qs_data_exists(out)) return QS_OK;
    char plain[QS_DATA_PATH_MAX];
    QS_TRY(qs_data_join(plain, dir, base));
    if (qs_data_exists(plain)) memcpy(out, plain, sizeof plain);
    return QS_OK; /* keep the .gz name for the "missing" message */
}

qs_status qs_fashion_mnist_load(const char *dir, bool train_split, qs_dataset *out) {
    memset(out, 0, sizeof *out);
    if (!dir) dir = FMNIST_DEFAULT_DIR;
    const char *split = train_split ? "train" : "t10k";
    char base[64], img_path[QS_DATA_PATH_MAX], lbl_path[QS_DATA_PATH_MAX];
    snprintf(base, sizeof base, "%s-images-idx3-ubyte", split);
    QS_TRY(fmnist_path(img_path, dir, base));
    snprintf(base, sizeof base, "%s-labels-idx1-ubyte", split);
    QS_TRY(fmnist_path(lbl_path, dir, base));

    int64_t ldims[3] = {0}, idims[3] = {0};
    uint8_t *lbl = NULL, *img = NULL;
    qs_status st = idx_read_u8(lbl_path, 1, "labels", ldims, &lbl);
    if (st != QS_OK) return st;
    st = idx_read_u8(img_path, 3, "images", idims, &img);
    if (st != QS_OK) goto fail;
    if (idims[0] != ldims[0]) {
        st = QS_FAIL(QS_ERR_FORMAT,
                     "count mismatch: %s holds %lld images but %s holds %lld labels; the two files must come from "
                     "the same split",
                     img_path, (long long)idims[0], lbl_path, (long long)ldims[0]);
        goto fail;
    }
    for (int64_t i = 0; i < ldims[0]; i++) {
        if (lbl[i] >= FMNIST_CLASSES) {
            st = QS_FAIL(QS_ERR_FORMAT, "%s: label %u of record %lld (byte offset %lld) is out of range 0..%d", lbl_path,
                         lbl[i], (long long)i, (long long)(8 + i), FMNIST_CLASSES - 1);
            goto fail;
        }
    }
    out->labels = malloc((size_t)ldims[0] * sizeof *out->labels);
    if (!out->labels) {
        st = QS_FAIL(QS_ERR_OOM, "cannot allocate %lld labels for %s", (long long)ldims[0], lbl_path);
        goto fail;
    }
    for (int64_t i = 0; i < ldims[0]; i++) out->labels[i] = lbl[i];
    free(lbl);
    snprintf(out->name, sizeof out->name, "fashion-mnist");
    out->n = idims[0];
    out->h = idims[1];
    out->w = idims[2];
    out->c = 1;
    out->classes = FMNIST_CLASSES;
    out->label_len = 1;
    out->pixels = img; /* IDX images are N×H×W row-major = NHWC with C = 1 */
    out->mean[0] = FMNIST_MEAN;
    out->std[0] = FMNIST_STD;
    for (int k = 1; k < 4; k++) out->std[k] = 1.0f;
    return QS_OK;
fail:
    free(lbl);
    free(img);
    free(out->labels);
    memset(out, 0, sizeof *out);
    return st;
}
