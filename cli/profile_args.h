/* cli/profile_args.h — defines: the --profile argument of `simulate` and `plan`: "FILE" (one
 * profile for every worker) or "TYPE=FILE,..." (one per device type), with every file read and checked. */
#ifndef QSYNC_CLI_PROFILE_ARGS_H
#define QSYNC_CLI_PROFILE_ARGS_H

#include "io/profile_file.h"
#include "qsync/status.h"

#define QS_CLI_MAX_PROFILES 16

typedef struct qs_profile_args {
    char type[QS_CLI_MAX_PROFILES][48]; /* "" = any type */
    char path[QS_CLI_MAX_PROFILES][4096];
    qs_profile prof[QS_CLI_MAX_PROFILES]; /* each read once (io/profile_file.h); its origin is its path */
    int n;
} qs_profile_args;

/* Parse the list and read every file (free with qs_profile_args_free, also after a failure). */
qs_status qs_profile_args_read(const char *list, qs_profile_args *p);
void qs_profile_args_free(qs_profile_args *p);

/* The index of the profile for a worker of `type` (NULL: none): the one labelled with it, else
 * an unlabelled one; -1 when there is neither. */
int qs_profile_args_for(const qs_profile_args *p, const char *type);

#endif
