/* src/parallel/comm_mpi.h — defines: what the two files that call MPI share (comm_mpi.c, the
 * process group; coll_mpi.c, the MPI transport). Private to them: nothing else includes it. */
#ifndef QSYNC_PARALLEL_COMM_MPI_H
#define QSYNC_PARALLEL_COMM_MPI_H

#include "qsync/status.h"

/* QS_OK when rc is MPI_SUCCESS, else QS_ERR_BACKEND with MPI's message and `what` (the call). */
qs_status qs_mpi_check(int rc, const char *what);

#endif
