/* cli/stop_signals.c — SIGINT/SIGTERM received by one waiting thread (see stop_signals.h). */
#include "stop_signals.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

static sigset_t qs_stop_set;

/* Waits for SIGINT/SIGTERM for the life of the process. */
static void *qs_stop_signal_wait(void *arg) {
    atomic_int *flag = arg;
    for (;;) {
        int sig = 0;
        if (sigwait(&qs_stop_set, &sig) != 0) continue;
        if (sig == SIGINT && atomic_load(flag)) { /* Ctrl-C again: die as Ctrl-C does */
            signal(SIGINT, SIG_DFL);
            sigset_t only_int;
            sigemptyset(&only_int);
            sigaddset(&only_int, SIGINT);
            pthread_sigmask(SIG_UNBLOCK, &only_int, NULL);
            raise(SIGINT);
            continue;
        }
        atomic_store(flag, sig);
    }
    return NULL;
}

int qs_stop_signals_start(atomic_int *flag) {
    sigemptyset(&qs_stop_set);
    sigaddset(&qs_stop_set, SIGINT);
    sigaddset(&qs_stop_set, SIGTERM);
    sigset_t old;
    int e = pthread_sigmask(SIG_BLOCK, &qs_stop_set, &old);
    pthread_t t;
    if (e == 0) {
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        e = pthread_create(&t, &a, qs_stop_signal_wait, flag);
        pthread_attr_destroy(&a);
        if (e != 0) pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    if (e != 0) {
        fprintf(stderr, "qsync: cannot watch for SIGINT/SIGTERM (%s); they will end the process at once\n",
                strerror(e));
        return -1;
    }
    return 0;
}
