/* src/core/timer.h — defines: a monotonic wall clock in milliseconds and op-time records. */
#ifndef QSYNC_CORE_TIMER_H
#define QSYNC_CORE_TIMER_H

/* Milliseconds from an arbitrary fixed origin (CLOCK_MONOTONIC). */
double qs_now_ms(void);

#endif
