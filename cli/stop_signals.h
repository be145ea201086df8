/* cli/stop_signals.h — SIGINT/SIGTERM turned into a "stop after this step" flag.
 *
 * No handler ever runs on a compute thread: the signals are blocked in the calling thread (and
 * so in every thread created after it: OpenMP's, MPI's) and one waiting thread receives them.
 * A handler would let the kernel write its signal frame below the interrupted thread's stack
 * pointer, and some of oneDNN 2.x's JIT GEMM kernels point that register into the heap while
 * they run (oneDNN issue 4845, fixed upstream in PR 4855): glibc then reports heap corruption
 * steps later. */
#ifndef QS_CLI_STOP_SIGNALS_H
#define QS_CLI_STOP_SIGNALS_H

#include <stdatomic.h>

/* Block SIGINT and SIGTERM in this thread and start the thread that waits for them. Call it
 * before any other thread exists (before MPI_Init and the first OpenMP region). The first
 * signal stores its number in *flag (which the trainer polls between steps); a second SIGINT
 * ends the process at once, as Ctrl-C does. Returns 0, or -1 (with a message on stderr) when
 * the thread could not start, in which case the signals keep their default action. */
int qs_stop_signals_start(atomic_int *flag);

#endif
