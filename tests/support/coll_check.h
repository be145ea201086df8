/* tests/support/coll_check.h — every collective of the communication interface
 * (src/parallel/coll.h) on one communicator, against references every rank computes itself
 * (each rank's inputs are a function of its rank): all-reduce (several lengths, zero, several
 * in flight, s32 and i64 where summed), reduce-scatter and all-gather with equal and uneven
 * pieces (one of them empty; all-gather also in place), all-to-all of bytes, send/recv around
 * the ring, and the refusals (dtypes a transport does not sum, collectives it does not have,
 * overlapping buffers, bad counts, peers and dtypes). Shared by tests/test_comm.c (the mpi
 * transport on host buffers) and tests/test_cuda_dist.c (ipc and nccl on device buffers). It
 * runs inside a rank (under mpirun or as a group of one) and prints one line per failure. */
#ifndef QSYNC_TESTS_COLL_CHECK_H
#define QSYNC_TESTS_COLL_CHECK_H

#include "parallel/coll.h"

/* Run the checks on c, whose buffers live in backend be's memory (NULL: host memory), inside
 * a registered arena. Sums of integers (exact in FP32, so any order gives them) are compared
 * for equality; on ipc, whose sums run in rank order, also a sum of fractions bit for bit.
 * Returns the number of failed checks; the count of checks run into *checks. */
int qs_test_coll_checks(qs_coll *c, qs_backend *be, int *checks);

#endif
