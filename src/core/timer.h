/* src/core/timer.h — defines: a monotonic wall clock and the process CPU clock, in milliseconds. */
#ifndef QSYNC_CORE_TIMER_H
#define QSYNC_CORE_TIMER_H

/* Milliseconds from an arbitrary fixed origin (CLOCK_MONOTONIC). */
double qs_now_ms(void);
/* CPU time used so far by all threads of the process (CLOCK_PROCESS_CPUTIME_ID), in ms.
 * The slowdown an OS quota applies to some compute is wall time × threads / CPU time. */
double qs_process_cpu_ms(void);

#endif
