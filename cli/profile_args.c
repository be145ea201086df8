/* cli/profile_args.c — defines: the --profile list of `simulate` and `plan` (profile_args.h). */
#include "profile_args.h"

#include <stdio.h>
#include <string.h>

qs_status qs_profile_args_read(const char *list, qs_profile_args *p) {
    memset(p, 0, sizeof *p);
    for (const char *s = list; *s;) {
        size_t len = strcspn(s, ",");
        if (p->n == QS_CLI_MAX_PROFILES) return QS_FAIL(QS_ERR_INVALID_ARG, "--profile: more than %d files", QS_CLI_MAX_PROFILES);
        char item[4096];
        if (len >= sizeof item) return QS_FAIL(QS_ERR_INVALID_ARG, "--profile: an entry is too long");
        memcpy(item, s, len);
        item[len] = '\0';
        char *eq = strchr(item, '='), *file = item;
        if (eq) {
            *eq = '\0';
            if (strlen(item) >= sizeof p->type[p->n])
                return QS_FAIL(QS_ERR_INVALID_ARG, "--profile: device type '%s' is too long", item);
            snprintf(p->type[p->n], sizeof p->type[p->n], "%s", item);
            file = eq + 1;
        }
        snprintf(p->path[p->n], sizeof p->path[p->n], "%s", file);
        QS_TRY(qs_profile_read(p->path[p->n], &p->prof[p->n]));
        p->n++;
        s += len;
        if (*s == ',') s++;
    }
    if (p->n == 0) return QS_FAIL(QS_ERR_INVALID_ARG, "--profile: no file given");
    return QS_OK;
}

void qs_profile_args_free(qs_profile_args *p) {
    for (int i = 0; i < p->n; i++) qs_profile_free(&p->prof[i]);
    p->n = 0;
}

int qs_profile_args_for(const qs_profile_args *p, const char *type) {
    for (int i = 0; i < p->n; i++)
        if (p->type[i][0] && type && strcmp(p->type[i], type) == 0) return i;
    for (int i = 0; i < p->n; i++)
        if (!p->type[i][0]) return i;
    return -1;
}
