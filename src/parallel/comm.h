/* src/parallel/comm.h — defines: the process group of a data-parallel job. Under `mpirun` it is
 * MPI's world communicator (Open MPI; the only file that calls MPI is src/parallel/comm_mpi.c);
 * started without a launcher it is a group of one that needs no MPI at all.
 *
 * Every blocking wait takes a timeout: a peer that stalled (SIGSTOP) or died must end the job
 * with a message, never hang it. Non-blocking collectives make progress only while the
 * caller tests them (Open MPI 4.1 has no asynchronous progress), so callers poll. */
#ifndef QSYNC_PARALLEL_COMM_H
#define QSYNC_PARALLEL_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qsync/status.h"

typedef struct qs_comm qs_comm;

#define QS_COMM_MAX_REQS 256

/* Join the job: MPI when launched by mpirun (its environment says so), else a group of one.
 * argc/argv may be NULL. */
qs_status qs_comm_init(int *argc, char ***argv, qs_comm **out);
/* Leave the job (MPI_Finalize); safe on NULL. */
void qs_comm_finalize(qs_comm *c);
/* Abort every rank of the job with `code` (after a fatal error on one rank). */
void qs_comm_abort(qs_comm *c, int code);

int qs_comm_rank(const qs_comm *c);
int qs_comm_world(const qs_comm *c);
/* "mpi" or "single". */
const char *qs_comm_kind(const qs_comm *c);

/* Announce that this rank has reached point `phase` (0..QS_COMM_PHASES-1, increasing within a
 * step) of `step` (>= 1) — a small non-blocking message to every peer — and take note of the
 * peers' announcements. When a collective times out, the ranks whose last announcement is
 * behind this rank's are named in the error: the stalled or dead ones. */
#define QS_COMM_PHASES 1024
qs_status qs_comm_arrive(qs_comm *c, int64_t step, int phase);

/* Start an in-place sum of n floats over all ranks; *req identifies it (< QS_COMM_MAX_REQS
 * outstanding). A group of one completes at once. */
qs_status qs_comm_iallreduce_sum_f32(qs_comm *c, float *buf, int64_t n, int *req);
/* Progress and test a started reduction; *done when it has completed (then req is free). */
qs_status qs_comm_test(qs_comm *c, int req, bool *done);
/* Wait for a started reduction, polling; fails after timeout_s seconds (<= 0: no timeout)
 * with a message saying that a peer did not arrive. */
qs_status qs_comm_wait(qs_comm *c, int req, double timeout_s);

/* MPI_Allreduce (sum, in place) called directly and blocking, without timeout: the reference
 * `qsync bench allreduce` compares the bucketed path with. */
qs_status qs_comm_allreduce_sum_f32_direct(qs_comm *c, float *buf, int64_t n);

/* Blocking in-place reductions of small arrays (sum of doubles; min and max of uint64), with
 * the same timeout. */
qs_status qs_comm_allreduce_sum_f64(qs_comm *c, double *buf, int n, double timeout_s);
qs_status qs_comm_allreduce_minmax_u64(qs_comm *c, uint64_t v, uint64_t *min, uint64_t *max, double timeout_s);

/* Broadcast a byte string from `root` to every rank, with the same timeout. On root, *buf and *n
 * are the message (unchanged); on the others *buf becomes a malloc'ed copy with a terminating NUL
 * beyond its *n bytes (caller frees; its value on entry is ignored). A group of one returns at once. */
qs_status qs_comm_bcast_bytes(qs_comm *c, int root, char **buf, size_t *n, double timeout_s);

#endif
