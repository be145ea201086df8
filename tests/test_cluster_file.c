/* tests/test_cluster_file.c — the cluster reader's typing (src/io/cluster.h): whole numbers
 * where counts are meant, each key given once, "comment" a string. (The rest of the format's
 * checks: tests/test_dist.c.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "io/cluster.h"
#include "run_cmd.h"

/* Read a cluster file of text; its status, and the message must hold `want` (NULL: QS_OK). */
static void expect(const char *text, const char *want) {
    char path[256];
    qs_test_write_tmp("c.json", text);
    snprintf(path, sizeof path, "%s/c.json", qs_test_tmp);
    qs_cluster c;
    qs_status st = qs_cluster_read(path, &c);
    if (!want) {
        if (st != QS_OK) fail_msg("%s: %s", text, qs_last_error());
        qs_cluster_free(&c);
        return;
    }
    if (st != QS_ERR_FORMAT || !strstr(qs_last_error(), want))
        fail_msg("%s: status %d, \"%s\"; want \"%s\"", text, (int)st, qs_last_error(), want);
    assert_int_equal(c.n_workers, 0);
}

#define HEAD "{\"format\": \"qsync-cluster\", \"version\": 1, "

static void test_cluster_typing(void **state) {
    (void)state;
    expect(HEAD "\"comment\": \"two\", \"workers\": [{\"device\": \"cpu\", \"type\": \"a\", \"threads\": 2, "
           "\"memory_mb\": 512, \"comment\": \"x\"}]}", NULL);
    expect(HEAD "\"workers\": [{\"device\": \"cpu\", \"type\": \"a\", \"threads\": 1.5}]}",
           "workers[0].threads must be a whole number");
    expect(HEAD "\"workers\": [{\"device\": \"cpu\", \"type\": \"a\", \"threads\": 2000}]}",
           "workers[0].threads must be a number in [0, 1024]");
    expect(HEAD "\"workers\": [{\"device\": \"cpu\", \"type\": \"a\", \"memory_mb\": 0.5}]}",
           "workers[0].memory_mb must be a whole number");
    expect(HEAD "\"workers\": [{\"device\": \"cpu\", \"type\": \"a\", \"type\": \"b\"}]}",
           "key \"type\" appears twice in workers[0]");
    expect(HEAD "\"version\": 1, \"workers\": [{\"device\": \"cpu\", \"type\": \"a\"}]}",
           "key \"version\" appears twice in the top level");
    expect(HEAD "\"comment\": 3, \"workers\": [{\"device\": \"cpu\", \"type\": \"a\"}]}",
           "\"comment\" in the top level must be a string");
    expect(HEAD "\"workers\": [{\"device\": \"cpu\", \"type\": \"a\", \"emulation\": {\"slowdown\": 2, "
           "\"slowdown\": 3}}]}", "key \"slowdown\" appears twice in workers[0].emulation");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        QS_TMPDIR_TEST(test_cluster_typing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
