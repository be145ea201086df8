/* tests/test_atomic_file.c — atomic replace, abort cleanup, bounded reads and output
 * directory checks (src/core/atomic_file.c). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/atomic_file.h"
#include "run_cmd.h"

static void test_write_replace_read(void **state) {
    const char *dir = *state; /* qs_test_tmp */
    char path[128];
    snprintf(path, sizeof path, "%s/a.json", dir);
    assert_int_equal(qs_write_file_atomic(path, "{\"v\":1}", 7), QS_OK);
    assert_int_equal(qs_write_file_atomic(path, "{\"v\":22}", 8), QS_OK);
    assert_int_equal(qs_test_count_entries(dir), 1);
    void *data;
    size_t n;
    assert_int_equal(qs_read_file(path, 1024, &data, &n), QS_OK);
    assert_int_equal(n, 8);
    assert_string_equal((char *)data, "{\"v\":22}"); /* NUL-terminated */
    free(data);

    /* size limit */
    qs_error_clear();
    assert_int_equal(qs_read_file(path, 7, &data, &n), QS_ERR_IO);
    assert_null(data);
    assert_non_null(strstr(qs_last_error(), "limit"));
    assert_non_null(strstr(qs_last_error(), path));
    /* empty file */
    assert_int_equal(qs_write_file_atomic(path, "", 0), QS_OK);
    assert_int_equal(qs_read_file(path, 0, &data, &n), QS_OK);
    assert_int_equal(n, 0);
    free(data);
    /* missing file, directory */
    char missing[160];
    snprintf(missing, sizeof missing, "%s/none", dir);
    assert_int_equal(qs_read_file(missing, 10, &data, &n), QS_ERR_NOT_FOUND);
    assert_non_null(strstr(qs_last_error(), missing));
    assert_int_equal(qs_read_file(dir, 10, &data, &n), QS_ERR_IO);
}

static void test_abort_and_streaming(void **state) {
    const char *dir = *state; /* qs_test_tmp */
    char path[128];
    snprintf(path, sizeof path, "%s/b.bin", dir);
    assert_int_equal(qs_write_file_atomic(path, "old", 3), QS_OK);

    qs_atomic_file af;
    assert_int_equal(qs_atomic_begin(&af, path), QS_OK);
    assert_int_equal(qs_test_count_entries(dir), 2); /* b.bin and b.bin.tmp.<pid> */
    assert_int_equal(qs_atomic_write(&af, "new content", 11), QS_OK);
    qs_atomic_abort(&af);
    qs_atomic_abort(&af); /* idempotent */
    assert_int_equal(qs_test_count_entries(dir), 1);
    void *data;
    size_t n;
    assert_int_equal(qs_read_file(path, 100, &data, &n), QS_OK);
    assert_string_equal((char *)data, "old");
    free(data);

    assert_int_equal(qs_atomic_begin(&af, path), QS_OK);
    assert_int_equal(qs_atomic_write(&af, "part1,", 6), QS_OK);
    assert_int_equal(qs_atomic_write(&af, "part2", 5), QS_OK);
    assert_int_equal(qs_atomic_commit(&af), QS_OK);
    assert_int_equal(qs_read_file(path, 100, &data, &n), QS_OK);
    assert_string_equal((char *)data, "part1,part2");
    free(data);
    assert_int_equal(qs_test_count_entries(dir), 1);

    /* no directory: fails at begin, nothing created */
    char bad[160];
    snprintf(bad, sizeof bad, "%s/nodir/x", dir);
    qs_error_clear();
    assert_int_equal(qs_write_file_atomic(bad, "x", 1), QS_ERR_IO);
    assert_non_null(strstr(qs_last_error(), bad));
    assert_int_equal(qs_test_count_entries(dir), 1);
}

static void test_dir_ensure_writable(void **state) {
    const char *dir = *state; /* qs_test_tmp */
    char nested[160];
    snprintf(nested, sizeof nested, "%s/x/y/z/", dir);
    assert_int_equal(qs_dir_ensure_writable(nested), QS_OK);
    struct stat sb;
    assert_int_equal(stat(nested, &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));
    assert_int_equal(qs_dir_ensure_writable(nested), QS_OK); /* exists already */

    char file[160];
    snprintf(file, sizeof file, "%s/plain", dir);
    assert_int_equal(qs_write_file_atomic(file, "x", 1), QS_OK);
    qs_error_clear();
    assert_int_equal(qs_dir_ensure_writable(file), QS_ERR_IO);
    assert_non_null(strstr(qs_last_error(), "is not writable"));
    assert_non_null(strstr(qs_last_error(), file));

    char under_file[180];
    snprintf(under_file, sizeof under_file, "%s/sub", file);
    assert_int_equal(qs_dir_ensure_writable(under_file), QS_ERR_IO);
    assert_non_null(strstr(qs_last_error(), under_file));

    if (geteuid() != 0) { /* root ignores permissions */
        char ro[160];
        snprintf(ro, sizeof ro, "%s/ro", dir);
        assert_int_equal(mkdir(ro, 0500), 0);
        assert_int_equal(qs_dir_ensure_writable(ro), QS_ERR_IO);
        assert_non_null(strstr(qs_last_error(), "is not writable"));
        char ro_sub[180];
        snprintf(ro_sub, sizeof ro_sub, "%s/new", ro);
        assert_int_equal(qs_dir_ensure_writable(ro_sub), QS_ERR_IO);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        QS_TMPDIR_TEST(test_write_replace_read),
        QS_TMPDIR_TEST(test_abort_and_streaming),
        QS_TMPDIR_TEST(test_dir_ensure_writable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
