#!/usr/bin/env bash
# Stop the single-node SLURM cluster started by .ci/slurm/start.sh.
#
#   bash .ci/slurm/stop.sh
#
# Stops slurmd and slurmctld through the pid files named in /etc/slurm/slurm.conf (only when that
# file was written by start.sh), and munged only when start.sh started it. State and logs stay in
# the state dir (.slurm/ by default) for inspection; delete it by hand for a clean slate.
set -euo pipefail

conf=/etc/slurm/slurm.conf
marker="# written by .ci/slurm/start.sh (framework local test cluster)"
say() { echo "[slurm-local] $*"; }
die() { echo "[slurm-local] ERROR: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root"
if [ ! -f "$conf" ]; then say "no $conf: nothing to stop"; exit 0; fi
grep -qF "$marker" "$conf" || die "$conf was not written by start.sh; not stopping a real cluster"

setting() { sed -n "s/^$1=//p" "$conf" | head -n1; }
stop_pidfile() {  # name pidfile
    local name="$1" pidfile="$2" pid
    if [ -s "$pidfile" ] && pid="$(cat "$pidfile")" && kill -0 "$pid" 2>/dev/null; then
        say "stopping $name (pid $pid)"
        kill -TERM "$pid"
        for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
        if kill -0 "$pid" 2>/dev/null; then say "$name did not exit; sending SIGKILL"; kill -KILL "$pid" || true; fi
    else
        say "$name not running"
    fi
}

stop_pidfile slurmd "$(setting SlurmdPidFile)"
stop_pidfile slurmctld "$(setting SlurmctldPidFile)"

state="$(dirname "$(setting SlurmctldPidFile)")"
if [ -f "$state/munged.started-by-us" ]; then
    stop_pidfile munged /run/munge/munged.pid
    rm -f "$state/munged.started-by-us"
fi
say "SLURM local cluster stopped"
