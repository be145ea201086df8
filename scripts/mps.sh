#!/usr/bin/env bash
# The NVIDIA MPS control daemon that lets several ranks share one GPU, each within its cluster
# worker's SM share and pinned memory limit (docs/CLUSTERS.md, src/parallel/mps.h).
#
#   scripts/mps.sh start    start `nvidia-cuda-mps-control -d` and wait (<= 10 s) until its control
#                           pipe answers; already running: says so, exit 0
#   scripts/mps.sh stop     ask it to quit and wait (<= 10 s) until it has exited; not running: says so
#   scripts/mps.sh status   say whether it runs: exit 0 running, 1 not
#
# CUDA_MPS_PIPE_DIRECTORY (default /tmp/nvidia-mps) and CUDA_MPS_LOG_DIRECTORY (default
# /tmp/nvidia-mps-log) are exported to the daemon and created; a job must see the same pipe
# directory (qsync looks there too). The daemon counts as running while the pid file it writes
# into the pipe directory names a live process and its `control` pipe exists (the socket stays
# behind after the daemon quits, so it alone proves nothing).
set -euo pipefail
export CUDA_MPS_PIPE_DIRECTORY=${CUDA_MPS_PIPE_DIRECTORY:-/tmp/nvidia-mps}
export CUDA_MPS_LOG_DIRECTORY=${CUDA_MPS_LOG_DIRECTORY:-/tmp/nvidia-mps-log}
PIPE=$CUDA_MPS_PIPE_DIRECTORY
LOG=$CUDA_MPS_LOG_DIRECTORY
PID_FILE=$PIPE/nvidia-cuda-mps-control.pid
WAIT_TENTHS=100 # 10 s in steps of 0.1 s

# Print the daemon's pid when its pid file names a live process; else return 1.
daemon_pid() {
    local pid
    [[ -r $PID_FILE ]] || return 1
    pid=$(<"$PID_FILE")
    [[ $pid =~ ^[0-9]+$ && -e /proc/$pid ]] || return 1
    echo "$pid"
}

# Whether the daemon runs: a live pid and its control pipe (socket or FIFO).
running() {
    daemon_pid >/dev/null && [[ -S $PIPE/control || -p $PIPE/control ]]
}

# Fail unless nvidia-cuda-mps-control is on PATH.
need_control_binary() {
    command -v nvidia-cuda-mps-control >/dev/null ||
        { echo "mps.sh: nvidia-cuda-mps-control not found on PATH (it comes with the NVIDIA driver's utilities)" >&2; exit 1; }
}

start() {
    need_control_binary
    if running; then
        echo "MPS control daemon already running (pid $(daemon_pid), pipe directory $PIPE)"
        return 0
    fi
    mkdir -p "$PIPE" "$LOG"
    nvidia-cuda-mps-control -d
    for ((i = 0; i < WAIT_TENTHS; i++)); do
        if running; then
            echo "MPS control daemon started (pid $(daemon_pid), pipe directory $PIPE, logs in $LOG)"
            return 0
        fi
        sleep 0.1
    done
    echo "mps.sh: the MPS control daemon did not come up within 10 s (no live pid in $PID_FILE with" \
        "$PIPE/control); see $LOG/control.log" >&2
    exit 1
}

stop() {
    local pid
    if ! pid=$(daemon_pid); then
        echo "MPS control daemon not running (pipe directory $PIPE)"
        return 0
    fi
    need_control_binary
    echo quit | nvidia-cuda-mps-control
    for ((i = 0; i < WAIT_TENTHS; i++)); do
        if [[ ! -e /proc/$pid ]]; then
            echo "MPS control daemon stopped (was pid $pid)"
            return 0
        fi
        sleep 0.1
    done
    echo "mps.sh: the MPS control daemon (pid $pid) has not exited 10 s after quit (clients still attached?" \
        "nvidia-smi lists them); see $LOG/control.log" >&2
    exit 1
}

status() {
    if running; then
        echo "MPS control daemon running (pid $(daemon_pid), pipe directory $PIPE)"
        return 0
    fi
    echo "MPS control daemon not running (pipe directory $PIPE)"
    return 1
}

case "${1:-}" in
start) start ;;
stop) stop ;;
status) status ;;
*)
    echo "usage: scripts/mps.sh start|stop|status" >&2
    exit 2
    ;;
esac
