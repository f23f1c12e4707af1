#!/usr/bin/env bash
# A real two-node SLURM cluster on this machine, for tests and for trying the sbatch scripts:
# Debian's slurmctld + two slurmd daemons (node1, node2, both 127.0.0.1 on their own ports) + munge.
#
#   slurm/local_cluster.sh start     # install packages if missing, start munged/slurmctld/slurmd x2, wait until idle
#   eval "$(slurm/local_cluster.sh env)"   # export SLURM_CONF for sbatch/squeue/scontrol in this shell
#   sbatch --nodes=2 --ntasks-per-node=1 slurm/train.sbatch trainer=ddp_cpu ...
#   slurm/local_cluster.sh status
#   slurm/local_cluster.sh stop      # cancel jobs, stop the daemons, remove the cluster's state directory
#
# Needs root (daemons, apt-get, /etc/hosts). What it changes outside its state directory:
#   - apt-get installs slurmctld slurmd slurm-client munge when they are missing,
#   - /etc/hosts gets "127.0.0.1 node1 node2" (once; left in place by `stop`),
#   - munged is started on the system socket if none answers (and stopped again by `stop`),
#   - /etc/munge/munge.key is created if missing (Debian's munge package creates one).
# Everything else (slurm.conf, spool, state, logs, pid files) lives in $CROSSMOD_SLURM_DIR
# (default /tmp/crossmod-slurm); the config is passed to daemons and clients via SLURM_CONF.
set -euo pipefail

DIR=${CROSSMOD_SLURM_DIR:-/tmp/crossmod-slurm}
CONF=$DIR/slurm.conf
CTLD_PORT=${CROSSMOD_SLURMCTLD_PORT:-16817}
NODES=(node1 node2)
NODE_PORTS=(17001 17002)
NODE_CPUS=${CROSSMOD_SLURM_NODE_CPUS:-2}
START_TIMEOUT=${CROSSMOD_SLURM_START_TIMEOUT:-60}
PACKAGES=(slurmctld slurmd slurm-client munge)

log() { echo "[local_cluster] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

need_root() { [[ $(id -u) -eq 0 ]] || die "must run as root (starts daemons, may apt-get install and edit /etc/hosts)"; }

install_packages() {
  local missing=()
  command -v slurmctld >/dev/null || missing+=(slurmctld)
  command -v slurmd >/dev/null || missing+=(slurmd)
  command -v sbatch >/dev/null || missing+=(slurm-client)
  command -v munged >/dev/null || missing+=(munge)
  [[ ${#missing[@]} -eq 0 ]] && return 0
  command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get to install them"
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # Debian's postinst scripts try to start services; there is no init system in containers: forbid it.
  local policy=/usr/sbin/policy-rc.d created_policy=0
  if [[ ! -e $policy ]]; then printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod +x "$policy"; created_policy=1; fi
  if ! apt-get install -y --no-install-recommends "${PACKAGES[@]}" >"$DIR/apt.log" 2>&1; then
    apt-get update >>"$DIR/apt.log" 2>&1 || true
    apt-get install -y --no-install-recommends "${PACKAGES[@]}" >>"$DIR/apt.log" 2>&1 || { tail -20 "$DIR/apt.log" >&2; die "apt-get install failed (log: $DIR/apt.log)"; }
  fi
  [[ $created_policy -eq 1 ]] && rm -f "$policy"
  return 0
}

setup_hosts() {
  local name
  for name in "${NODES[@]}"; do
    if ! getent hosts "$name" >/dev/null; then
      log "adding '127.0.0.1 $name' to /etc/hosts"
      echo "127.0.0.1 $name  # crossmod local SLURM cluster" >>/etc/hosts
    fi
  done
}

munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

start_munge() {
  munge_ok && return 0
  if [[ ! -s /etc/munge/munge.key ]]; then
    log "creating /etc/munge/munge.key"
    mkdir -p /etc/munge
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
  fi
  local user=root
  id munge >/dev/null 2>&1 && user=munge
  chown "$user:" /etc/munge /etc/munge/munge.key && chmod 0700 /etc/munge && chmod 0400 /etc/munge/munge.key
  mkdir -p /run/munge /var/lib/munge /var/log/munge && chown "$user:" /run/munge /var/lib/munge /var/log/munge
  chmod 0755 /run/munge
  log "starting munged (as $user)"
  if [[ $user == root ]]; then munged --force; else runuser -u munge -- munged; fi
  touch "$DIR/started-munged"
  local i
  for i in $(seq 1 50); do munge_ok && return 0; sleep 0.1; done
  die "munged does not answer (see /var/log/munge/munged.log)"
}

write_conf() {
  mkdir -p "$DIR/state" "$DIR/log"
  local host
  host=$(hostname -s)
  {
    echo "# Written by slurm/local_cluster.sh: a two-node cluster on one machine."
    echo "ClusterName=crossmod"
    echo "SlurmctldHost=$host(127.0.0.1)"
    echo "SlurmctldPort=$CTLD_PORT"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "AuthType=auth/munge"
    echo "CredType=cred/munge"
    # A requeued job waits cred_expire seconds (default 120) before it may start again.
    echo "AuthInfo=cred_expire=10"
    echo "StateSaveLocation=$DIR/state"
    echo "SlurmdSpoolDir=$DIR/spool-%n"
    echo "SlurmctldPidFile=$DIR/slurmctld.pid"
    echo "SlurmdPidFile=$DIR/slurmd-%n.pid"
    echo "SlurmctldLogFile=$DIR/log/slurmctld.log"
    echo "SlurmdLogFile=$DIR/log/slurmd-%n.log"
    echo "SlurmctldDebug=info"
    echo "SlurmdDebug=info"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "SwitchType=switch/none"
    echo "MpiDefault=none"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "AccountingStorageType=accounting_storage/none"
    echo "JobCompType=jobcomp/none"
    echo "SchedulerType=sched/backfill"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_CPU"
    # The node definitions below are taken as they are (both daemons share this machine's CPUs).
    echo "SlurmdParameters=config_overrides"
    echo "ReturnToService=2"
    echo "JobRequeue=1"
    echo "KillWait=5"
    echo "MinJobAge=600"
    echo "InactiveLimit=0"
    echo "SlurmdTimeout=60"
    echo "MessageTimeout=20"
    echo "PropagateResourceLimits=NONE"
    local i
    for i in "${!NODES[@]}"; do
      echo "NodeName=${NODES[$i]} NodeHostname=${NODES[$i]} NodeAddr=127.0.0.1 Port=${NODE_PORTS[$i]} CPUs=$NODE_CPUS RealMemory=4000 State=UNKNOWN"
    done
    echo "PartitionName=debug Nodes=$(IFS=,; echo "${NODES[*]}") Default=YES MaxTime=INFINITE State=UP"
  } >"$CONF"
}

pid_alive() { [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

dump_logs() {
  local f
  for f in "$DIR"/log/*.log; do
    [[ -f $f ]] || continue
    echo "----- $f (last 30 lines)" >&2
    tail -30 "$f" >&2
  done
}

nodes_idle() {
  local states
  states=$(SLURM_CONF=$CONF sinfo -h -N -o '%N %t' 2>/dev/null) || return 1
  [[ $(grep -cE ' (idle|mix|alloc)$' <<<"$states") -eq ${#NODES[@]} ]]
}

start() {
  need_root
  mkdir -p "$DIR"
  install_packages
  setup_hosts
  start_munge
  if pid_alive "$DIR/slurmctld.pid" && nodes_idle; then
    log "already running (SLURM_CONF=$CONF)"
    return 0
  fi
  [[ -f $CONF ]] || write_conf
  export SLURM_CONF=$CONF
  if ! pid_alive "$DIR/slurmctld.pid"; then
    log "starting slurmctld"
    slurmctld -f "$CONF"
  fi
  local i
  for i in "${!NODES[@]}"; do
    if ! pid_alive "$DIR/slurmd-${NODES[$i]}.pid"; then
      log "starting slurmd for ${NODES[$i]} (port ${NODE_PORTS[$i]})"
      mkdir -p "$DIR/spool-${NODES[$i]}"
      slurmd -f "$CONF" -N "${NODES[$i]}"
    fi
  done
  local deadline=$((SECONDS + START_TIMEOUT))
  until nodes_idle; do
    if ((SECONDS > deadline)); then
      SLURM_CONF=$CONF sinfo -N >&2 || true
      dump_logs
      die "nodes not idle after ${START_TIMEOUT}s"
    fi
    sleep 0.5
  done
  log "cluster up: $(SLURM_CONF=$CONF sinfo -h -N -o '%N:%t' | tr '\n' ' ')(SLURM_CONF=$CONF)"
}

stop_pid() {
  local file=$1 name=$2 i
  [[ -s $file ]] || return 0
  local pid
  pid=$(cat "$file")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then log "$name ($pid) ignores SIGTERM: SIGKILL"; kill -KILL "$pid" 2>/dev/null || true; fi
  fi
  rm -f "$file"
}

stop() {
  need_root
  if [[ ! -d $DIR ]]; then log "not running"; return 0; fi
  if [[ -f $CONF ]] && pid_alive "$DIR/slurmctld.pid"; then
    SLURM_CONF=$CONF scancel --full --quiet --state=PENDING 2>/dev/null || true
    SLURM_CONF=$CONF scancel --quiet "$(SLURM_CONF=$CONF squeue -h -o %A | tr '\n' ' ')" 2>/dev/null || true
    local i
    for i in $(seq 1 60); do [[ -z $(SLURM_CONF=$CONF squeue -h -t R,CG 2>/dev/null) ]] && break; sleep 0.5; done
  fi
  local node
  for node in "${NODES[@]}"; do stop_pid "$DIR/slurmd-$node.pid" "slurmd $node"; done
  stop_pid "$DIR/slurmctld.pid" slurmctld
  # Job steps that outlived their slurmd (slurmstepd re-parents to init) would hold the next cluster's ports.
  local pid
  for pid in $(pgrep -x slurmstepd || true); do
    if grep -qs "$DIR" "/proc/$pid/cmdline" "/proc/$pid/environ"; then kill -KILL "$pid" 2>/dev/null || true; fi
  done
  if [[ -f $DIR/started-munged ]]; then
    local mpid
    mpid=$(cat /run/munge/munged.pid 2>/dev/null || true)
    if [[ -n $mpid ]] && kill -0 "$mpid" 2>/dev/null; then log "stopping munged"; kill -TERM "$mpid" || true; fi
  fi
  rm -rf "$DIR"
  log "stopped"
}

status() {
  if [[ ! -f $CONF ]]; then echo "not running (no $CONF)"; return 1; fi
  local ok=0
  pid_alive "$DIR/slurmctld.pid" && echo "slurmctld: running ($(cat "$DIR/slurmctld.pid"))" || { echo "slurmctld: down"; ok=1; }
  local node
  for node in "${NODES[@]}"; do
    pid_alive "$DIR/slurmd-$node.pid" && echo "slurmd $node: running ($(cat "$DIR/slurmd-$node.pid"))" || { echo "slurmd $node: down"; ok=1; }
  done
  SLURM_CONF=$CONF sinfo -N 2>/dev/null || ok=1
  SLURM_CONF=$CONF squeue 2>/dev/null || true
  echo "export SLURM_CONF=$CONF"
  return $ok
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  status) status ;;
  env) echo "export SLURM_CONF=$CONF" ;;
  logs) dump_logs ;;
  *) echo "usage: $0 start|stop|restart|status|env|logs" >&2; exit 2 ;;
esac
