/* src/parallel/comm.h — defines: the process group of a data-parallel job. Under `mpirun` it is
 * MPI's world communicator (Open MPI); started without a launcher it is a group of one that
 * needs no MPI at all. The collectives on buffers (all-reduce, reduce-scatter, all-gather,
 * all-to-all, send/recv) over a transport are parallel/coll.h; this header keeps the group, its
 * step announcements and the small blocking helpers the runtime agrees with.
 *
 * Every blocking wait takes a timeout: a peer that stalled (SIGSTOP) or died must end the job
 * with a message, never hang it. Open MPI 4.1 has no asynchronous progress: work in flight
 * advances only inside MPI calls, so every wait polls (and calls qs_comm_heartbeat). Only
 * comm_mpi.c (this group) and coll_mpi.c (the MPI transport) call MPI. */
#ifndef QSYNC_PARALLEL_COMM_H
#define QSYNC_PARALLEL_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qsync/status.h"

typedef struct qs_comm qs_comm;

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

/* While waiting for anything the peers take part in: take in their announcements, and repeat
 * this rank's every 0.5 s so that peers can tell a waiting rank from a stopped one. Cheap;
 * nothing in a group of one. */
void qs_comm_heartbeat(qs_comm *c);
/* The QS_ERR_TIMEOUT of a wait for `what` ("an all-reduce of ...") that did not complete within
 * timeout_s: names the peers silent for more than half the timeout, else those whose last
 * announcement is behind this rank's (the stalled or dead ones). */
qs_status qs_comm_timeout_error(qs_comm *c, const char *what, double timeout_s);

/* MPI_Allreduce (sum, in place) called directly and blocking, without timeout: the reference
 * `qsync bench allreduce` compares the path training takes (parallel/coll.h) with. */
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
