#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for trying ray_on_slurm.sbatch and for the tests.
#
#   sudo apt-get install -y slurm-wlm munge          # Debian/Ubuntu packages (once)
#   scripts/slurm/local_cluster.sh start DIR [CTLD_PORT SLURMD_PORT]
#   SLURM_CONF=DIR/slurm.conf sbatch --wait scripts/slurm/ray_on_slurm.sbatch trainer.total_training_steps=2
#   scripts/slurm/local_cluster.sh stop DIR
#
# Everything lives in DIR (slurm.conf, state, logs, pid files); nothing in /etc/slurm changes, so
# commands find this cluster through SLURM_CONF=DIR/slurm.conf. Runs as root (slurmd starts jobs
# as their user). munged is started when none is running and stopped by `stop` only if `start`
# started it. One node, named after this host, with all its CPUs and memory less 2 GiB.
set -euo pipefail

cmd=${1:?usage: local_cluster.sh start|stop DIR [CTLD_PORT SLURMD_PORT]}
dir=$(realpath -m "${2:?usage: local_cluster.sh start|stop DIR}")
ctld_port=${3:-6817}
slurmd_port=${4:-6818}

munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

start() {
    command -v slurmctld >/dev/null || { echo "slurmctld not found: apt-get install -y slurm-wlm munge" >&2; exit 1; }
    mkdir -p "$dir"/{state,spool,log}
    if ! munge_ok; then
        install -d -o munge -g munge -m 0755 /run/munge
        runuser -u munge -- /usr/sbin/munged
        touch "$dir/started_munged"
        for _ in $(seq 20); do munge_ok && break; sleep 0.5; done
    fi
    local host cpus mem
    host=$(hostname -s)
    cpus=$(nproc)
    mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 2048 ))
    cat > "$dir/slurm.conf" <<CONF
ClusterName=verllite
SlurmctldHost=$host
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
SlurmUser=root
SlurmdUser=root
MpiDefault=none
ReturnToService=2
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
    export SLURM_CONF="$dir/slurm.conf"
    slurmctld
    slurmd
    for _ in $(seq 60); do
        sinfo -h -o %T 2>/dev/null | grep -q idle && { echo "slurm up: SLURM_CONF=$SLURM_CONF"; return 0; }
        sleep 0.5
    done
    echo "slurm did not come up; logs in $dir/log" >&2
    tail -n 20 "$dir"/log/*.log >&2 || true
    exit 1
}

stop() {
    for daemon in slurmd slurmctld; do
        if [[ -f "$dir/$daemon.pid" ]]; then
            pid=$(cat "$dir/$daemon.pid")
            kill "$pid" 2>/dev/null || true
            for _ in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
        fi
    done
    if [[ -f "$dir/started_munged" ]]; then
        kill "$(cat /run/munge/munged.pid)" 2>/dev/null || true
        rm -f "$dir/started_munged"
    fi
}

case "$cmd" in
    start) start ;;
    stop) stop ;;
    *) echo "unknown command $cmd: start|stop" >&2; exit 2 ;;
esac
