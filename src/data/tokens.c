/* src/data/tokens.c — token streams for language modelling: llm.c token files ("tokens:PATH"),
 * their writer, and synthetic token streams ("synthetic-text:V:T").
 *
 * llm.c's format (dev/data/data_common.py, write_datafile): a header of 256 little-endian int32 —
 * magic 20240520, version 1, the number of tokens, zeros — then the tokens as little-endian
 * uint16. Files are read and written byte by byte in that order, so the host's byte order does
 * not matter. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/atomic_file.h"
#include "data/datafile.h"
#include "data/readers.h"
#include "qsync/rng.h"

#define TOKENS_HINT "tokens:PATH names an llm.c token file (a 1024-byte header, then uint16 tokens)"
#define TOKENS_CHUNK 32768 /* tokens converted per read or write */
#define SYNTEXT_FOLLOW 0.8f /* probability that the next token is the table's */

/* Little-endian int32 at p. */
static int32_t le32(const uint8_t *p) {
    return (int32_t)((uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24));
}

/* Store v at p as little-endian int32. */
static void put_le32(uint8_t *p, int32_t v) {
    uint32_t u = (uint32_t)v;
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(u >> (8 * i));
}

qs_status qs_token_file_write(const char *path, const uint16_t *tokens, int64_t n) {
    if (!path || n < 0 || n > INT32_MAX || (n > 0 && !tokens))
        return QS_FAIL(QS_ERR_INVALID_ARG, "qs_token_file_write: %lld tokens (need 0..%d and a token array) for %s",
                       (long long)n, INT32_MAX, path ? path : "(null path)");
    uint8_t hdr[QS_TOKEN_FILE_HEADER_BYTES];
    memset(hdr, 0, sizeof hdr);
    put_le32(hdr, QS_TOKEN_FILE_MAGIC);
    put_le32(hdr + 4, QS_TOKEN_FILE_VERSION);
    put_le32(hdr + 8, (int32_t)n);
    uint8_t *buf = malloc(2 * TOKENS_CHUNK);
    if (!buf) return QS_FAIL(QS_ERR_OOM, "qs_token_file_write: out of memory writing %s", path);
    qs_atomic_file af;
    qs_status st = qs_atomic_begin(&af, path);
    if (st != QS_OK) {
        free(buf);
        return st;
    }
    st = qs_atomic_write(&af, hdr, sizeof hdr);
    for (int64_t i = 0; st == QS_OK && i < n; i += TOKENS_CHUNK) {
        int64_t m = n - i < TOKENS_CHUNK ? n - i : TOKENS_CHUNK;
        for (int64_t j = 0; j < m; j++) {
            buf[2 * j] = (uint8_t)tokens[i + j];
            buf[2 * j + 1] = (uint8_t)(tokens[i + j] >> 8);
        }
        st = qs_atomic_write(&af, buf, (size_t)(2 * m));
    }
    free(buf);
    if (st != QS_OK) {
        qs_atomic_abort(&af);
        return st;
    }
    return qs_atomic_commit(&af);
}

/* The header of token file f (path for messages) → *count. */
static qs_status read_header(qs_datafile *f, const char *path, int64_t *count) {
    uint8_t hdr[QS_TOKEN_FILE_HEADER_BYTES];
    int64_t got = 0;
    QS_TRY(qs_datafile_read(f, hdr, sizeof hdr, &got));
    if (got < (int64_t)sizeof hdr)
        return QS_FAIL(QS_ERR_FORMAT, "%s: malformed header: the file has only %lld bytes, an llm.c token file starts "
                       "with a header of 256 int32 (%d bytes)", path, (long long)got, QS_TOKEN_FILE_HEADER_BYTES);
    int32_t magic = le32(hdr), version = le32(hdr + 4), n = le32(hdr + 8);
    if (magic != QS_TOKEN_FILE_MAGIC)
        return QS_FAIL(QS_ERR_FORMAT, "%s: bad magic %d at byte offset 0, expected %d (an llm.c token file); is this "
                       "the right file?", path, magic, QS_TOKEN_FILE_MAGIC);
    if (version != QS_TOKEN_FILE_VERSION)
        return QS_FAIL(QS_ERR_FORMAT, "%s: unsupported version %d at byte offset 4, expected %d (uint16 tokens)", path,
                       version, QS_TOKEN_FILE_VERSION);
    if (n < 0)
        return QS_FAIL(QS_ERR_FORMAT, "%s: malformed header: negative token count %d at byte offset 8", path, n);
    *count = n;
    return QS_OK;
}

/* The n tokens after the header of f into tok (allocated by the caller), each checked < vocab,
 * using buf (2·TOKENS_CHUNK bytes); then nothing may follow. */
static qs_status read_tokens(qs_datafile *f, const char *path, int64_t vocab, int64_t n, uint16_t *tok, uint8_t *buf) {
    for (int64_t i = 0; i < n; i += TOKENS_CHUNK) {
        int64_t m = n - i < TOKENS_CHUNK ? n - i : TOKENS_CHUNK, got = 0;
        QS_TRY(qs_datafile_read(f, buf, 2 * m, &got));
        if (got < 2 * m) {
            int64_t end = QS_TOKEN_FILE_HEADER_BYTES + 2 * i + got;
            return QS_FAIL(QS_ERR_FORMAT, "%s: truncated: the header declares %lld tokens (%lld bytes after the header) "
                           "but the data ends at byte offset %lld, after %lld tokens; the file is incomplete — write "
                           "it again", path, (long long)n, (long long)(2 * n), (long long)end, (long long)(i + got / 2));
        }
        for (int64_t j = 0; j < m; j++) {
            uint16_t t = (uint16_t)(buf[2 * j] | (buf[2 * j + 1] << 8));
            if (t >= vocab)
                return QS_FAIL(QS_ERR_FORMAT, "%s: token %u at position %lld (byte offset %lld) is not below the "
                               "vocabulary size %lld; give the vocabulary as tokens:PATH:T:V", path, (unsigned)t,
                               (long long)(i + j), (long long)(QS_TOKEN_FILE_HEADER_BYTES + 2 * (i + j)),
                               (long long)vocab);
            tok[i + j] = t;
        }
    }
    uint8_t extra[64];
    int64_t got = 0;
    QS_TRY(qs_datafile_read(f, extra, sizeof extra, &got));
    if (got > 0)
        return QS_FAIL(QS_ERR_FORMAT, "%s: trailing bytes at byte offset %lld: the header declares %lld tokens but the "
                       "file holds more; the header's count (byte offset 8) is wrong", path,
                       (long long)(QS_TOKEN_FILE_HEADER_BYTES + 2 * n), (long long)n);
    return QS_OK;
}

qs_status qs_token_file_read(const char *path, int64_t vocab, uint16_t **tokens, int64_t *n) {
    *tokens = NULL;
    *n = 0;
    if (vocab < 1 || vocab > 65536)
        return QS_FAIL(QS_ERR_INVALID_ARG, "%s: vocabulary size %lld, must be 1..65536 (tokens are uint16)", path,
                       (long long)vocab);
    qs_datafile f;
    QS_TRY(qs_datafile_open(&f, path, TOKENS_HINT));
    int64_t count = 0;
    qs_status st = read_header(&f, path, &count);
    uint16_t *tok = NULL;
    uint8_t *buf = NULL;
    if (st == QS_OK) {
        tok = malloc((size_t)(count > 0 ? count : 1) * sizeof *tok);
        buf = malloc(2 * TOKENS_CHUNK);
        if (!tok || !buf) st = QS_FAIL(QS_ERR_OOM, "%s: out of memory for %lld tokens", path, (long long)count);
    }
    if (st == QS_OK) st = read_tokens(&f, path, vocab, count, tok, buf);
    free(buf);
    qs_datafile_close(&f);
    if (st != QS_OK) {
        free(tok);
        return st;
    }
    if (count == 0) {
        free(tok);
        tok = NULL;
    }
    *tokens = tok;
    *n = count;
    return QS_OK;
}

/* Split "PATH[:T[:V]]" into path, T and V (defaults where absent). A trailing field counts as a
 * number only if it is all digits, so a path may hold colons as long as its last part is not a
 * plain number. */
static qs_status parse_spec(const char *spec, char path[QS_DATA_PATH_MAX], int64_t *T, int64_t *V) {
    size_t len = strlen(spec);
    if (len == 0 || len >= QS_DATA_PATH_MAX || spec[len - 1] == ':')
        return QS_FAIL(QS_ERR_INVALID_ARG, "dataset 'tokens:%s': expected tokens:PATH[:T[:V]] (e.g. "
                       "tokens:data/tiny_shakespeare_train.bin:1024 or tokens:train.bin:1024:50304)", spec);
    memcpy(path, spec, len + 1);
    long long num[2];
    int k = 0;
    while (k < 2) {
        char *colon = strrchr(path, ':');
        if (!colon || colon == path) break;
        const char *p = colon + 1;
        bool digits = *p != 0 && strlen(p) <= 9;
        for (; *p && digits; p++) digits = *p >= '0' && *p <= '9';
        if (!digits) break;
        num[k++] = strtoll(colon + 1, NULL, 10);
        *colon = 0;
    }
    *T = QS_TOKENS_DEFAULT_T;
    *V = QS_TOKENS_DEFAULT_VOCAB;
    if (k == 1) *T = num[0];
    if (k == 2) {
        *T = num[1];
        *V = num[0];
    }
    if (*T < 1 || *T > QS_TEXT_MAX_T || *V < 2 || *V > 65536)
        return QS_FAIL(QS_ERR_INVALID_ARG, "dataset 'tokens:%s': sequence length %lld and vocabulary %lld: need T in "
                       "1..%d and V in 2..65536 (tokens are uint16)", spec, (long long)*T, (long long)*V, QS_TEXT_MAX_T);
    return QS_OK;
}

/* The test split's file: path with the last "train" of its file name replaced by "val". */
static qs_status val_sibling(const char *path, char out[QS_DATA_PATH_MAX]) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *hit = NULL;
    for (const char *p = strstr(base, "train"); p; p = strstr(p + 1, "train")) hit = p;
    if (!hit)
        return QS_FAIL(QS_ERR_NOT_FOUND, "tokens:%s has no test split: the test split is the file whose name has the "
                       "last \"train\" replaced by \"val\", and the file name %s holds no \"train\"; name the files "
                       "like data_train.bin and data_val.bin", path, base);
    int k = snprintf(out, QS_DATA_PATH_MAX, "%.*sval%s", (int)(hit - path), path, hit + 5);
    if (k < 0 || k >= QS_DATA_PATH_MAX) return QS_FAIL(QS_ERR_INVALID_ARG, "tokens:%s: path too long", path);
    if (!qs_data_exists(out))
        return QS_FAIL(QS_ERR_NOT_FOUND, "tokens:%s has no test split: %s does not exist (the test split is the file "
                       "whose name has the last \"train\" replaced by \"val\")", path, out);
    return QS_OK;
}

qs_status qs_tokens_load(const char *spec, bool train_split, qs_dataset *out) {
    memset(out, 0, sizeof *out);
    char path[QS_DATA_PATH_MAX], file[QS_DATA_PATH_MAX];
    int64_t T = 0, V = 0;
    QS_TRY(parse_spec(spec, path, &T, &V));
    if (train_split) memcpy(file, path, strlen(path) + 1);
    else QS_TRY(val_sibling(path, file));
    uint16_t *tok;
    int64_t n;
    QS_TRY(qs_token_file_read(file, V, &tok, &n));
    return qs_dataset_token_stream("tokens", file, tok, n, T, V, out);
}

qs_status qs_dataset_synthetic_text(int64_t vocab, int64_t T, int64_t n_tokens, uint64_t seed, uint64_t stream,
                                    qs_dataset *out) {
    memset(out, 0, sizeof *out);
    if (vocab < 2 || vocab > 65536 || T < 1 || T > QS_TEXT_MAX_T || n_tokens < T + 1 || n_tokens > ((int64_t)1 << 36))
        return QS_FAIL(QS_ERR_INVALID_ARG, "synthetic text: vocabulary %lld, sequence length %lld, %lld tokens: need a "
                       "vocabulary of 2..65536, T in 1..%d and T + 1 .. 2^36 tokens", (long long)vocab, (long long)T,
                       (long long)n_tokens, QS_TEXT_MAX_T);
    uint16_t *next = malloc((size_t)vocab * sizeof *next), *tok = malloc((size_t)n_tokens * sizeof *tok);
    if (!next || !tok) {
        free(next);
        free(tok);
        return QS_FAIL(QS_ERR_OOM, "synthetic text: out of memory for %lld tokens", (long long)n_tokens);
    }
    qs_rng r;
    qs_rng_init(&r, qs_rng_key(seed, "synthetic-text-next", 0), 0);
    for (int64_t v = 0; v < vocab; v++) next[v] = (uint16_t)qs_rng_below(&r, (uint64_t)vocab);
    qs_rng_init(&r, qs_rng_key(seed, "synthetic-text-stream", stream), 0);
    tok[0] = (uint16_t)qs_rng_below(&r, (uint64_t)vocab);
    for (int64_t k = 1; k < n_tokens; k++) {
        bool follow = qs_rng_uniform(&r) < SYNTEXT_FOLLOW;
        uint16_t noise = (uint16_t)qs_rng_below(&r, (uint64_t)vocab); /* drawn either way */
        tok[k] = follow ? next[tok[k - 1]] : noise;
    }
    free(next);
    return qs_dataset_token_stream("synthetic-text", "synthetic text", tok, n_tokens, T, vocab, out);
}
