/* src/data/fortunes.c — the text of the Debian packages fortunes + fortunes-min as two tasks
 * (docs/DATA.md): "fortunes", byte-level language modelling, and "fortune-topics", which topical
 * file a fortune comes from. The corpus is every plain fortune file of the directory (no *.dat,
 * *.u8, symbolic links, hidden files or subdirectories) in byte order of their names, each split
 * into fortunes at lines that are exactly "%"; a fortune is the text between two such lines with
 * its trailing newlines removed, and an empty one is skipped. Fortune k of the corpus belongs to
 * the test split when k % 10 == 9 and to the training split otherwise, in both tasks. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/atomic_file.h"
#include "data/datafile.h"
#include "data/readers.h"

#define FORTUNES_HINT                                                                                          \
    "install the Debian packages fortunes and fortunes-min (apt-get install fortunes fortunes-min) or pass " \
    "--data-dir with a folder of fortune files"
#define FORTUNE_FILE_MAX ((size_t)1 << 30) /* 1 GiB per file: far above any fortune file */
#define FORTUNE_TEST_EVERY 10              /* fortune k is a test fortune when k % 10 == 9 */

const char *const qs_fortune_topics[QS_FORTUNE_TOPIC_COUNT] = {
    "computers", "education", "food", "law", "love", "medicine", "politics", "science", "sports",
};

typedef struct fortune_ref {
    int file;         /* index into the corpus' files */
    int64_t off, len; /* bytes [off, off + len) of that file */
} fortune_ref;

typedef struct fortune_corpus {
    char **names;     /* file names, sorted */
    uint8_t **text;   /* whole files */
    int n_files;
    fortune_ref *f;   /* fortunes in corpus order */
    int64_t n, cap;
} fortune_corpus;

/* Release everything corpus c holds and zero it. */
static void corpus_free(fortune_corpus *c) {
    for (int i = 0; i < c->n_files; i++) {
        free(c->names[i]);
        free(c->text[i]);
    }
    free(c->names);
    free(c->text);
    free(c->f);
    memset(c, 0, sizeof *c);
}

/* True for a name the corpus skips: hidden, the strfile index (*.dat) or the UTF-8 alias (*.u8). */
static bool skipped_name(const char *name) {
    size_t len = strlen(name);
    return name[0] == '.' || (len >= 4 && strcmp(name + len - 4, ".dat") == 0) ||
           (len >= 3 && strcmp(name + len - 3, ".u8") == 0);
}

/* qsort comparator: file names in byte order. */
static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The sorted names of the plain fortune files in dir into c->names / c->n_files. A missing
 * directory → QS_ERR_NOT_FOUND with the install hint; none found → QS_ERR_NOT_FOUND too. */
static qs_status list_files(const char *dir, fortune_corpus *c) {
    DIR *d = opendir(dir);
    if (!d) {
        int e = errno;
        if (e == ENOENT || e == ENOTDIR)
            return QS_FAIL(QS_ERR_NOT_FOUND, "%s: no such directory; %s", dir, FORTUNES_HINT);
        return QS_FAIL(QS_ERR_IO, "%s: cannot open the directory: %s", dir, strerror(e));
    }
    qs_status st = QS_OK;
    int cap = 0;
    struct dirent *de;
    while (st == QS_OK && (de = readdir(d)) != NULL) {
        if (skipped_name(de->d_name)) continue;
        char path[QS_DATA_PATH_MAX];
        struct stat sb;
        st = qs_data_join(path, dir, de->d_name);
        if (st != QS_OK) break;
        if (lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) continue; /* symlinks, directories, vanished */
        if (c->n_files == cap) {
            cap = cap ? 2 * cap : 64;
            char **nn = realloc(c->names, (size_t)cap * sizeof *nn);
            if (!nn) {
                st = QS_FAIL(QS_ERR_OOM, "out of memory listing %s", dir);
                break;
            }
            c->names = nn;
        }
        c->names[c->n_files] = strdup(de->d_name);
        if (!c->names[c->n_files]) st = QS_FAIL(QS_ERR_OOM, "out of memory listing %s", dir);
        else c->n_files++;
    }
    closedir(d);
    if (st != QS_OK) return st;
    if (c->n_files == 0)
        return QS_FAIL(QS_ERR_NOT_FOUND, "%s holds no fortune files (plain files other than *.dat and *.u8); %s", dir,
                       FORTUNES_HINT);
    qsort(c->names, (size_t)c->n_files, sizeof *c->names, cmp_names);
    return QS_OK;
}

/* Append fortune [off, off + len) of file `file` to c (trailing newlines already removed; len > 0). */
static qs_status add_fortune(fortune_corpus *c, int file, int64_t off, int64_t len) {
    if (c->n == c->cap) {
        int64_t cap = c->cap ? 2 * c->cap : 4096;
        fortune_ref *nf = realloc(c->f, (size_t)cap * sizeof *nf);
        if (!nf) return QS_FAIL(QS_ERR_OOM, "out of memory for %lld fortunes", (long long)cap);
        c->f = nf;
        c->cap = cap;
    }
    c->f[c->n++] = (fortune_ref){.file = file, .off = off, .len = len};
    return QS_OK;
}

/* Split file `file` (len bytes) into fortunes at lines that are exactly "%". */
static qs_status split_file(fortune_corpus *c, int file, int64_t len) {
    const uint8_t *t = c->text[file];
    int64_t start = 0, line = 0; /* start of the current fortune, of the current line */
    while (line <= len) {
        const uint8_t *nl = line < len ? memchr(t + line, '\n', (size_t)(len - line)) : NULL;
        int64_t end = nl ? nl - t : len; /* end of this line (exclusive, without '\n') */
        bool sep = end - line == 1 && t[line] == '%';
        if (sep || end == len) {
            int64_t stop = sep ? line : len;
            while (stop > start && t[stop - 1] == '\n') stop--;
            if (stop > start) QS_TRY(add_fortune(c, file, start, stop - start));
            start = end + 1;
        }
        if (end == len) break;
        line = end + 1;
    }
    return QS_OK;
}

/* Load the corpus of dir (NULL → QS_FORTUNES_DEFAULT_DIR) into *c (zeroed first; freed on error). */
static qs_status corpus_load(const char *dir, fortune_corpus *c) {
    memset(c, 0, sizeof *c);
    if (!dir) dir = QS_FORTUNES_DEFAULT_DIR;
    qs_status st = list_files(dir, c);
    if (st == QS_OK) {
        c->text = calloc((size_t)c->n_files, sizeof *c->text);
        if (!c->text) st = QS_FAIL(QS_ERR_OOM, "out of memory for %d fortune files", c->n_files);
    }
    for (int i = 0; st == QS_OK && i < c->n_files; i++) {
        char path[QS_DATA_PATH_MAX];
        size_t size = 0;
        void *data = NULL;
        st = qs_data_join(path, dir, c->names[i]);
        if (st == QS_OK) st = qs_read_file(path, FORTUNE_FILE_MAX, &data, &size);
        c->text[i] = data;
        if (st == QS_OK) st = split_file(c, i, (int64_t)size);
    }
    if (st == QS_OK && c->n == 0)
        st = QS_FAIL(QS_ERR_FORMAT, "%s: the fortune files hold no fortunes (text between lines of a single %%)", dir);
    if (st != QS_OK) corpus_free(c);
    return st;
}

/* Whether corpus fortune k belongs to the requested split. */
static bool in_split(int64_t k, bool train_split) {
    return (k % FORTUNE_TEST_EVERY == FORTUNE_TEST_EVERY - 1) != train_split;
}

qs_status qs_fortunes_load(const char *dir, int64_t T, bool train_split, qs_dataset *out) {
    memset(out, 0, sizeof *out);
    fortune_corpus c;
    QS_TRY(corpus_load(dir, &c));
    int64_t n_tokens = 0;
    for (int64_t k = 0; k < c.n; k++)
        if (in_split(k, train_split)) n_tokens += c.f[k].len + 2;
    uint16_t *tok = malloc((size_t)(n_tokens > 0 ? n_tokens : 1) * sizeof *tok);
    if (!tok) {
        corpus_free(&c);
        return QS_FAIL(QS_ERR_OOM, "out of memory for %lld fortune tokens", (long long)n_tokens);
    }
    int64_t at = 0;
    for (int64_t k = 0; k < c.n; k++) {
        if (!in_split(k, train_split)) continue;
        const uint8_t *src = c.text[c.f[k].file] + c.f[k].off;
        for (int64_t i = 0; i < c.f[k].len; i++) tok[at++] = src[i];
        tok[at++] = '\n'; /* a blank line instead of the "%" separator */
        tok[at++] = '\n';
    }
    char what[QS_DATA_PATH_MAX + 64];
    snprintf(what, sizeof what, "fortunes %s split of %s", train_split ? "training" : "test",
             dir ? dir : QS_FORTUNES_DEFAULT_DIR);
    corpus_free(&c);
    return qs_dataset_token_stream("fortunes", what, tok, n_tokens, T, 256, out);
}

qs_status qs_fortune_topics_load(const char *dir, int64_t T, bool train_split, qs_dataset *out) {
    memset(out, 0, sizeof *out);
    if (!dir) dir = QS_FORTUNES_DEFAULT_DIR;
    fortune_corpus c;
    QS_TRY(corpus_load(dir, &c));
    int topic_of_file[4096];
    qs_status st = QS_OK;
    if (c.n_files > (int)(sizeof topic_of_file / sizeof *topic_of_file))
        st = QS_FAIL(QS_ERR_INVALID_ARG, "%s: %d fortune files, more than the 4096 supported", dir, c.n_files);
    for (int i = 0; st == QS_OK && i < c.n_files; i++) {
        topic_of_file[i] = -1;
        for (int k = 0; k < QS_FORTUNE_TOPIC_COUNT; k++)
            if (strcmp(c.names[i], qs_fortune_topics[k]) == 0) topic_of_file[i] = k;
    }
    for (int k = 0; st == QS_OK && k < QS_FORTUNE_TOPIC_COUNT; k++) {
        bool found = false;
        for (int i = 0; i < c.n_files; i++) found |= topic_of_file[i] == k;
        if (!found)
            st = QS_FAIL(QS_ERR_NOT_FOUND, "%s/%s: no such fortune file; fortune-topics needs %s (from the Debian "
                         "package fortunes: apt-get install fortunes fortunes-min) or --data-dir with those files",
                         dir, qs_fortune_topics[k], "computers, education, food, law, love, medicine, politics, "
                         "science and sports");
    }
    int64_t n = 0;
    for (int64_t k = 0; st == QS_OK && k < c.n; k++) n += topic_of_file[c.f[k].file] >= 0 && in_split(k, train_split);
    if (st == QS_OK && n == 0)
        st = QS_FAIL(QS_ERR_FORMAT, "%s: the topic files hold no %s fortunes", dir, train_split ? "training" : "test");
    if (st == QS_OK) st = qs_dataset_alloc_text(out, "fortune-topics", n, T, QS_FORTUNE_TOPIC_COUNT);
    int64_t j = 0;
    for (int64_t k = 0; st == QS_OK && k < c.n; k++) {
        const fortune_ref *f = &c.f[k];
        if (topic_of_file[f->file] < 0 || !in_split(k, train_split)) continue;
        const uint8_t *src = c.text[f->file] + f->off;
        const uint8_t *zero = memchr(src, 0, (size_t)f->len);
        if (zero) { /* byte 0 pads short fortunes: it must not occur in the text */
            st = QS_FAIL(QS_ERR_FORMAT, "%s/%s: byte 0 at byte offset %lld: fortune-topics pads with byte 0, which "
                         "must not occur in the text", dir, c.names[f->file], (long long)(f->off + (zero - src)));
            break;
        }
        int64_t keep = f->len < T ? f->len : T;
        uint8_t *dst = out->pixels + j * T;
        memcpy(dst, src, (size_t)keep);
        memset(dst + keep, 0, (size_t)(T - keep));
        out->labels[j++] = topic_of_file[f->file];
    }
    if (st != QS_OK) qs_dataset_free(out);
    corpus_free(&c);
    return st;
}
