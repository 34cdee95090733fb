#!/usr/bin/env bash
# Bring up, check and take down a real two-node Slurm cluster on this one machine.
#
#   scripts/local_slurm.sh up       # install what is missing, start everything, wait for idle nodes
#   scripts/local_slurm.sh status   # exit 0 when the cluster is up and usable, 1 otherwise
#   scripts/local_slurm.sh down     # stop every daemon that `up` started
#
#   eval "$(scripts/local_slurm.sh up)"   # `up` prints only `export SLURM_CONF=...` on stdout
#
# The cluster: nodes n1 and n2 (half of this host's CPUs and 2 fake GPUs each), partition `debug` (one job per
# core) and partition `load` (the same nodes, cores shared by many jobs, for load tests), ClusterName
# `localcluster`, with real accounting (slurmdbd + MariaDB) so that `sacct` works.
#
# Everything `up` writes (config, state, spool, logs, pid files, the MariaDB data) lives under one folder,
# ${LOCAL_SLURM_DIR:-/var/tmp/jaxtorch-slurm}. The daemons use their own ports and sockets there, so a system
# Slurm, munged or MariaDB on the same machine is neither used nor disturbed. /etc/slurm is never touched.
# Outside that folder `up` only installs Debian packages, creates /etc/munge/munge.key if it is missing, and
# adds `127.0.0.1 n1 n2` to /etc/hosts (multi-process JAX resolves the node names from the Slurm node list).
#
# Exit codes: 0 ok; 1 failure (the message names the log file to read); 2 bad usage;
# 3 this machine cannot run the cluster (not root, no apt-get, no mknod): tests skip on 3.
#
# The facts this relies on are in docs/cluster-profile.md, "What the local cluster relies on".

set -euo pipefail

readonly CLUSTER_NAME=localcluster
readonly NODES=(n1 n2)
readonly SLURMCTLD_PORT=16817
readonly SLURMDBD_PORT=16819
readonly MARIADB_PORT=16306   # bound to 127.0.0.1 only; the system MariaDB (if any) keeps 3306
declare -A SLURMD_PORT=([n1]=17001 [n2]=17002)
readonly PACKAGES=(slurmctld slurmd slurm-client munge slurmdbd mariadb-server)
readonly DB_NAME=slurm_acct_db
readonly DB_USER=slurm
# Jobs that may share one core in the `load` partition (load tests only; `debug` never shares a core).
readonly LOAD_TASKS_PER_CORE=40
readonly LOAD_TASK_MEMORY_MB=200   # a stand-in task of tests/integration/test_load.py peaks at about 110 MB
# Seconds to wait for each daemon to become usable before giving up.
readonly WAIT_SECONDS=${LOCAL_SLURM_WAIT:-90}

# Stop order: compute nodes first (so slurmctld sees no half-dead node), then the controller, then accounting,
# then the database under it, and munge last because every Slurm daemon authenticates through it.
readonly STOP_ORDER=(slurmd-n2 slurmd-n1 slurmctld slurmdbd mariadbd munged)

usage() {
    cat >&2 <<EOF
usage: $0 up|down|status

  up      install missing packages, start a two-node Slurm cluster (n1, n2) and wait until both nodes are idle;
          prints 'export SLURM_CONF=...' on stdout, so: eval "\$($0 up)"
  down    stop every daemon that 'up' started (safe when nothing runs)
  status  show the daemons and sinfo; exit 0 when the cluster is up and usable, 1 otherwise

State lives in \${LOCAL_SLURM_DIR:-/var/tmp/jaxtorch-slurm}.
EOF
}

log() { printf 'local_slurm: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
cannot_run_here() { log "$*"; exit 3; }

# ---------------------------------------------------------------------------------------------------------
# Paths. Slurm config files cannot quote values, so a folder with spaces or odd characters is refused.
DIR=${LOCAL_SLURM_DIR:-/var/tmp/jaxtorch-slurm}
case $DIR in
    /*) ;;
    *) log "LOCAL_SLURM_DIR must be an absolute path, got '$DIR'."; exit 2 ;;
esac
if [[ ! $DIR =~ ^[A-Za-z0-9/._-]+$ ]]; then
    log "LOCAL_SLURM_DIR may only contain letters, digits and / . _ - (Slurm config cannot quote), got '$DIR'."
    exit 2
fi
DIR=${DIR%/}
readonly DIR
readonly SLURM_CONF_FILE=$DIR/slurm.conf
readonly RUN=$DIR/run            # pid files this script writes, one per daemon, named as in STOP_ORDER
readonly LOGS=$DIR/log           # Slurm daemon logs, and stdout/stderr of every daemon we start
readonly MUNGE_DIR=$DIR/munge    # owned by user munge: our munged's socket, pid, seed and log
readonly MUNGE_SOCKET=$MUNGE_DIR/munge.socket.2
readonly MYSQL_DIR=$DIR/mysql    # owned by user mysql: our MariaDB's data, socket, pid and log
readonly MYSQL_SOCKET=$MYSQL_DIR/mysqld.sock
readonly MUNGE_KEY=/etc/munge/munge.key
export SLURM_CONF=$SLURM_CONF_FILE

# ---------------------------------------------------------------------------------------------------------
# Process bookkeeping. Each daemon runs in the foreground of its own session (setsid) with its output in a log
# file, and we record its pid ourselves. A pid counts as ours only while /proc/<pid>/comm still names the
# expected program, so a stale pid file (after a reboot or a crash) is never mistaken for a running daemon.

comm_of() {  # daemon key -> program name as shown in /proc/<pid>/comm
    case $1 in
        slurmd-*) echo slurmd ;;
        *) echo "$1" ;;
    esac
}

daemon_pid() {  # prints the pid and returns 0 if the daemon is running
    local name=$1 pid comm
    [[ -r $RUN/$name.pid ]] || return 1
    pid=$(<"$RUN/$name.pid")
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
    [[ $comm == "$(comm_of "$name")" ]] || return 1
    # A daemon that has exited but not yet been reaped by init (a zombie, state Z) is not running.
    [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]] || return 1
    echo "$pid"
}

is_running() { daemon_pid "$1" >/dev/null; }

spawn() {  # spawn NAME LOGFILE CMD... : start CMD detached, record its pid as NAME
    local name=$1 out=$2
    shift 2
    # </dev/null and the redirections detach the daemon from our stdin/stdout/stderr, and 3>&- 9>&- close the
    # saved stdout and the lock, so that a caller reading our output through a pipe (pytest, CI) sees EOF when
    # this script ends. In a non-interactive shell the background child is not a process group leader, so
    # setsid execs in place and $! is the daemon's own pid.
    setsid "$@" </dev/null >>"$out" 2>&1 3>&- 9>&- &
    echo $! >"$RUN/$name.pid"
}

stop_daemon() {  # TERM, wait, then KILL; forget the pid file
    local name=$1 pid i
    if pid=$(daemon_pid "$name"); then
        log "stopping $name (pid $pid)"
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < 300; i++)); do  # up to 30 s: MariaDB flushes InnoDB on shutdown
            is_running "$name" || break
            sleep 0.1
        done
        if is_running "$name"; then
            log "$name did not stop within 30 s, killing it"
            kill -KILL "$pid" 2>/dev/null || true
            for ((i = 0; i < 50; i++)); do
                is_running "$name" || break
                sleep 0.1
            done
        fi
        if is_running "$name"; then die "could not stop $name (pid $pid)"; fi
    fi
    rm -f "$RUN/$name.pid"
}

wait_until() {  # wait_until SECONDS DESCRIPTION LOGFILE CMD... : poll CMD until it succeeds
    local seconds=$1 what=$2 logfile=$3 deadline
    shift 3
    deadline=$((SECONDS + seconds))
    until "$@" >/dev/null 2>&1; do
        if ((SECONDS >= deadline)); then
            log "last lines of $logfile:"
            tail -n 20 "$logfile" >&2 2>/dev/null || true
            die "$what not ready after ${seconds}s; see $logfile (all logs: $LOGS, $MUNGE_DIR, $MYSQL_DIR)"
        fi
        sleep 0.5
    done
}

# ---------------------------------------------------------------------------------------------------------
# Cluster checks.

usable_node_count() {  # how many of n1, n2 are in a state that accepts jobs
    # %t is the compact state; a trailing '*' means "not responding", '~' powered off, '#' powering up, etc.
    sinfo -h -N -p debug -o '%N %t' 2>/dev/null |
        awk '$2 ~ /^(idle|mix|alloc|comp)$/ && ($1 == "n1" || $1 == "n2") {ok[$1] = 1} END {print length(ok)}'
}

all_daemons_running() {
    local name
    for name in "${STOP_ORDER[@]}"; do
        is_running "$name" || return 1
    done
}

cluster_usable() {
    all_daemons_running && [[ $(usable_node_count) == 2 ]]
}

munge_ok() { munge -n --socket="$MUNGE_SOCKET" | unmunge --socket="$MUNGE_SOCKET" >/dev/null; }
mariadb_ok() { mariadb-admin --no-defaults --socket="$MYSQL_SOCKET" -u root ping; }
slurmdbd_ok() { sacctmgr -n -P list cluster format=cluster; }
slurmctld_ok() { scontrol ping | grep -q 'is UP'; }

# ---------------------------------------------------------------------------------------------------------
# up: preconditions and packages.

check_can_run() {
    [[ $(id -u) == 0 ]] || cannot_run_here "'up' needs root: it installs Debian packages and runs the Slurm daemons as root."
    command -v apt-get >/dev/null || cannot_run_here "'up' needs apt-get to install Slurm, and this system has none."
}

install_packages() {
    local missing=() pkg
    for pkg in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
    done
    ((${#missing[@]} == 0)) && return 0
    log "installing ${missing[*]} (output in $LOGS/apt.log)"
    # policy-rc.d on this machine kind keeps the packages from starting their system services; if a service
    # does start elsewhere it does no harm, because our daemons use their own ports, sockets and folders.
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}"; } >"$LOGS/apt.log" 2>&1; then
        tail -n 20 "$LOGS/apt.log" >&2
        die "installing ${missing[*]} failed; see $LOGS/apt.log"
    fi
}

make_dirs() {
    mkdir -p "$DIR" "$RUN" "$LOGS" "$DIR/state" "$DIR/spool" "$DIR/dev" "$MUNGE_DIR" "$MYSQL_DIR"
    # The daemons running as munge and mysql must be able to reach their own sub-folders.
    chmod 755 "$DIR" "$LOGS"
    chmod 700 "$RUN" "$DIR/state"
    chown munge:munge "$MUNGE_DIR"
    chmod 755 "$MUNGE_DIR"   # clients (sbatch, srun, ... as any user) connect to the socket inside
    chown mysql:mysql "$MYSQL_DIR"
    chmod 750 "$MYSQL_DIR"
    local n
    for n in "${NODES[@]}"; do mkdir -p "$DIR/spool/$n"; done
}

make_fake_gpus() {
    # Slurm only accepts character or block devices as GPU files; a copy of /dev/null (1,3) is enough.
    local i
    for i in 0 1; do
        [[ -c $DIR/dev/gpu$i ]] && continue
        rm -f "$DIR/dev/gpu$i"
        mknod "$DIR/dev/gpu$i" c 1 3 2>/dev/null ||
            cannot_run_here "'up' cannot create the fake GPU device files (mknod is not permitted here), so Slurm cannot offer GPUs."
        chmod 666 "$DIR/dev/gpu$i"
    done
}

ensure_munge_key() {
    [[ -s $MUNGE_KEY ]] && return 0
    log "creating $MUNGE_KEY"
    mkdir -p /etc/munge
    chown munge:munge /etc/munge
    chmod 700 /etc/munge
    (umask 077 && dd if=/dev/urandom of="$MUNGE_KEY" bs=1024 count=1 status=none)
    chown munge:munge "$MUNGE_KEY"
    chmod 400 "$MUNGE_KEY"
}

ensure_hosts_entry() {
    # jax.distributed reads the coordinator host (n1) from the Slurm node list, so n1 and n2 must resolve.
    local n ok=1
    for n in "${NODES[@]}"; do
        [[ $(getent ahostsv4 "$n" 2>/dev/null | awk 'NR == 1 {print $1}') == 127.0.0.1 ]] || ok=0
    done
    ((ok)) && return 0
    log "adding '127.0.0.1 ${NODES[*]}' to /etc/hosts"
    printf '127.0.0.1 %s\n' "${NODES[*]}" >>/etc/hosts
}

# ---------------------------------------------------------------------------------------------------------
# up: configuration. Files are rewritten only when their content changes; a change while daemons run stops
# them first, so the cluster never runs on a mix of old and new settings.

real_memory_mb() {
    # Two nodes share this machine: give each at most half of it (less a margin), and at most 8000 MB.
    local total
    total=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)
    local half=$((total / 2 - 512))
    ((half > 8000)) && half=8000
    ((half < 500)) && half=500
    echo "$half"
}

db_password() {
    # Generated once and kept: MariaDB listens on 127.0.0.1 only, but a fixed password in git is still needless.
    local f=$DIR/dbd.pass
    if [[ ! -s $f ]]; then
        (umask 077 && head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$f")
    fi
    cat "$f"
}

render_slurm_conf() {
    local host mem n
    host=$(hostname)
    mem=$(real_memory_mb)
    cat <<EOF
# Written by scripts/local_slurm.sh; edits are overwritten by the next 'up'.
ClusterName=$CLUSTER_NAME
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$SLURMCTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# Our own munged, so that a system munge (or its absence) does not matter.
AuthInfo=socket=$MUNGE_SOCKET
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
# Memory is a consumable resource, so that a job's --mem (the profile's mem) is its limit; each partition gives
# jobs that ask for none a default share (DefMemPerCPU below).
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
# Both nodes are this one machine: trust the node lines below instead of what slurmd detects.
SlurmdParameters=config_overrides
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.daemon.pid
SlurmdPidFile=$DIR/run/slurmd-%n.daemon.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd-%n.log
GresTypes=gpu
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$SLURMDBD_PORT
# For slurmdbd connections Slurm takes the munge socket from here, not from AuthInfo.
AccountingStoragePass=$MUNGE_SOCKET
JobAcctGatherType=jobacct_gather/linux
# There is no task/cgroup here, so memory is enforced by polling: every second each step's memory is summed, and
# a step over its limit is killed (slurmstepd says so in the job's log; sacct shows FAILED).
JobAcctGatherParams=OverMemoryKill
JobAcctGatherFrequency=task=1
JobCompType=jobcomp/none
# Finished and cancelled jobs leave the controller after 30 s, not Slurm's 300: make bench submits (held) and
# cancels thousands of array tasks, and with 300 s a second run within five minutes found MaxJobCount full.
# sacct keeps every job's final state, so nothing needs these records after that.
MinJobAge=30
EOF
    # The two nodes share this machine's cores, so each gets its half: with more CPUs declared than exist,
    # Slurm would start more tasks than there are cores, and every timing taken there would be of contention.
    local cpus=$(( $(nproc) / ${#NODES[@]} ))
    (( cpus >= 1 )) || cpus=1
    for n in "${NODES[@]}"; do
        echo "NodeName=$n NodeHostname=$host NodeAddr=127.0.0.1 Port=${SLURMD_PORT[$n]} CPUs=$cpus RealMemory=$mem Gres=gpu:2 State=UNKNOWN"
    done
    echo "PartitionName=debug Nodes=$(IFS=,; echo "${NODES[*]}") Default=YES MaxTime=INFINITE State=UP DefMemPerCPU=$((mem / cpus))"
    # A job that asks for no memory gets the node's memory per core in debug, and $LOAD_TASK_MEMORY_MB MB in load.
    # The load partition is for load tests only: the same nodes, each core shared by up to $LOAD_TASKS_PER_CORE jobs
    # (memory allowing), so that a few hundred tiny array tasks run side by side and finish together, as on a
    # large cluster. Never for timings.
    echo "PartitionName=load Nodes=$(IFS=,; echo "${NODES[*]}") OverSubscribe=FORCE:$LOAD_TASKS_PER_CORE MaxTime=INFINITE State=UP DefMemPerCPU=$LOAD_TASK_MEMORY_MB"
}

render_gres_conf() {
    local n
    echo "# Written by scripts/local_slurm.sh. Fake GPUs: character devices that behave like /dev/null."
    for n in "${NODES[@]}"; do
        echo "NodeName=$n Name=gpu File=$DIR/dev/gpu[0-1]"
    done
}

render_slurmdbd_conf() {
    cat <<EOF
# Written by scripts/local_slurm.sh; edits are overwritten by the next 'up'.
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
DbdHost=localhost
DbdPort=$SLURMDBD_PORT
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$MARIADB_PORT
StorageUser=$DB_USER
StoragePass=$(db_password)
StorageLoc=$DB_NAME
LogFile=$LOGS/slurmdbd.log
PidFile=$DIR/run/slurmdbd.daemon.pid
EOF
}

CONFIG_CHANGED=0
write_if_changed() {  # write_if_changed FILE MODE < content
    local file=$1 mode=$2 tmp
    tmp=$(mktemp "$file.XXXXXX")
    cat >"$tmp"
    chmod "$mode" "$tmp"
    if [[ -f $file ]] && cmp -s "$tmp" "$file"; then
        rm -f "$tmp"
        return 0
    fi
    if any_daemon_running; then
        log "$(basename "$file") changed: restarting the cluster"
        do_down
    fi
    mv -f "$tmp" "$file"
    CONFIG_CHANGED=1
}

any_daemon_running() {
    local name
    for name in "${STOP_ORDER[@]}"; do
        is_running "$name" && return 0
    done
    return 1
}

write_configs() {
    render_slurm_conf | write_if_changed "$SLURM_CONF_FILE" 644
    render_gres_conf | write_if_changed "$DIR/gres.conf" 644
    # slurmdbd refuses a config readable by others; it holds the database password.
    render_slurmdbd_conf | write_if_changed "$DIR/slurmdbd.conf" 600
}

# ---------------------------------------------------------------------------------------------------------
# up: daemons, in dependency order. Each start_* is a no-op when the daemon already runs.

start_munged() {
    if ! is_running munged; then
        log "starting munged"
        # --force: our socket folder sits under /var/tmp, which munged would otherwise distrust (it is
        # world-writable, though sticky); it also clears a stale socket left by a killed munged.
        spawn munged "$MUNGE_DIR/munged.out" setpriv --reuid=munge --regid=munge --init-groups munged --foreground --force \
            --socket="$MUNGE_SOCKET" --pid-file="$MUNGE_DIR/munged.pid" \
            --seed-file="$MUNGE_DIR/munged.seed" --key-file="$MUNGE_KEY"
        # setpriv (unlike runuser, which forks) execs munged in place, so the recorded pid is munged's.
    fi
    wait_until 20 munged "$MUNGE_DIR/munged.out" munge_ok
}

start_mariadb() {
    local datadir=$MYSQL_DIR/data
    # --no-defaults: ignore /etc/mysql, whose socket and port belong to the system MariaDB.
    if [[ ! -f $MYSQL_DIR/initialized ]]; then
        log "initialising the MariaDB data folder"
        rm -rf "$datadir"
        if ! mariadb-install-db --no-defaults --user=mysql --datadir="$datadir" \
            --auth-root-authentication-method=socket --skip-test-db >"$LOGS/mariadb-install-db.log" 2>&1; then
            tail -n 20 "$LOGS/mariadb-install-db.log" >&2
            die "mariadb-install-db failed; see $LOGS/mariadb-install-db.log"
        fi
        touch "$MYSQL_DIR/initialized"
    fi
    if ! is_running mariadbd; then
        log "starting mariadbd on 127.0.0.1:$MARIADB_PORT"
        spawn mariadbd "$MYSQL_DIR/mariadbd.out" mariadbd --no-defaults --user=mysql --datadir="$datadir" \
            --socket="$MYSQL_SOCKET" --pid-file="$MYSQL_DIR/mariadbd.pid" --log-error="$MYSQL_DIR/mariadbd.log" \
            --port="$MARIADB_PORT" --bind-address=127.0.0.1 --skip-name-resolve \
            --innodb-buffer-pool-size=64M
    fi
    wait_until "$WAIT_SECONDS" mariadbd "$MYSQL_DIR/mariadbd.log" mariadb_ok
    # Idempotent: safe on every 'up', and it re-syncs the password if dbd.pass was regenerated.
    local pass
    pass=$(db_password)
    mariadb --no-defaults --socket="$MYSQL_SOCKET" -u root <<EOF
CREATE DATABASE IF NOT EXISTS $DB_NAME;
CREATE USER IF NOT EXISTS '$DB_USER'@'127.0.0.1' IDENTIFIED BY '$pass';
ALTER USER '$DB_USER'@'127.0.0.1' IDENTIFIED BY '$pass';
GRANT ALL ON $DB_NAME.* TO '$DB_USER'@'127.0.0.1';
EOF
}

start_slurmdbd() {
    if ! is_running slurmdbd; then
        log "starting slurmdbd on port $SLURMDBD_PORT"
        # slurmdbd finds slurmdbd.conf beside $SLURM_CONF.
        spawn slurmdbd "$LOGS/slurmdbd.out" slurmdbd -D
    fi
    wait_until "$WAIT_SECONDS" slurmdbd "$LOGS/slurmdbd.log" slurmdbd_ok
    if ! sacctmgr -n -P list cluster format=cluster | grep -qx "$CLUSTER_NAME"; then
        log "registering cluster $CLUSTER_NAME with slurmdbd"
        sacctmgr -i add cluster "$CLUSTER_NAME" >/dev/null
    fi
}

start_slurmctld() {
    if ! is_running slurmctld; then
        log "starting slurmctld on port $SLURMCTLD_PORT"
        spawn slurmctld "$LOGS/slurmctld.out" slurmctld -D -f "$SLURM_CONF_FILE"
    fi
    wait_until "$WAIT_SECONDS" slurmctld "$LOGS/slurmctld.log" slurmctld_ok
}

start_slurmd() {
    local n
    for n in "${NODES[@]}"; do
        if ! is_running "slurmd-$n"; then
            log "starting slurmd for $n on port ${SLURMD_PORT[$n]}"
            spawn "slurmd-$n" "$LOGS/slurmd-$n.out" slurmd -D -N "$n" -f "$SLURM_CONF_FILE"
        fi
    done
}

wait_for_nodes() {
    local deadline=$((SECONDS + WAIT_SECONDS)) next_resume=0 states stuck n
    until [[ $(usable_node_count) == 2 ]]; do
        states=$(sinfo -h -N -p debug -o '%N %t' 2>/dev/null | tr '\n' ' ')
        # A node that was set down or drained (a crash, a config change, an admin) stays so until told
        # otherwise. Only nodes that respond (no '*') can be resumed; retry now and then, not in a tight loop.
        stuck=$(sinfo -h -N -p debug -o '%N %t' 2>/dev/null | awk '$2 ~ /^(down|drain|drng|fail)$/ {print $1}' |
            paste -sd, -)
        if [[ -n $stuck ]] && ((SECONDS >= next_resume)); then
            log "resuming $stuck (sinfo: $states)"
            scontrol update nodename="$stuck" state=resume >/dev/null 2>&1 || true
            next_resume=$((SECONDS + 5))
        fi
        for n in "${NODES[@]}"; do
            is_running "slurmd-$n" || die "slurmd for $n exited; see $LOGS/slurmd-$n.log and $LOGS/slurmd-$n.out"
        done
        if ((SECONDS >= deadline)); then
            die "nodes not idle after ${WAIT_SECONDS}s (sinfo: $states); see $LOGS/slurmctld.log and $LOGS/slurmd-n1.log"
        fi
        sleep 0.5
    done
}

do_up() {
    check_can_run
    mkdir -p "$DIR" && chmod 755 "$DIR"
    # One 'up' or 'down' at a time: a second caller waits for the first.
    exec 9>"$DIR/.lock"
    flock -w 900 9 || die "another local_slurm.sh holds $DIR/.lock"

    # Fast path: already up with the same configuration -> nothing to do.
    if command -v sinfo >/dev/null && cluster_usable; then
        local before=$CONFIG_CHANGED
        write_configs
        if ((CONFIG_CHANGED == before)) && cluster_usable; then
            log "cluster already up"
            printf 'export SLURM_CONF=%s\n' "$SLURM_CONF_FILE" >&3
            return 0
        fi
    fi

    local t0=$SECONDS
    make_dirs_before_install
    install_packages
    make_dirs
    make_fake_gpus
    ensure_munge_key
    ensure_hosts_entry
    write_configs
    start_munged
    start_mariadb
    start_slurmdbd
    start_slurmctld
    start_slurmd
    wait_for_nodes
    log "cluster up in $((SECONDS - t0))s: nodes ${NODES[*]}, partitions debug and load; logs in $LOGS"
    printf 'export SLURM_CONF=%s\n' "$SLURM_CONF_FILE" >&3
}

make_dirs_before_install() {
    # apt.log needs LOGS before the munge and mysql users exist; the rest of make_dirs needs those users.
    mkdir -p "$LOGS"
    chmod 755 "$LOGS"
}

# ---------------------------------------------------------------------------------------------------------

cancel_jobs() {
    # Jobs still running when slurmd stops would leave slurmstepd processes behind: cancel them first.
    local jobs i
    is_running slurmctld && command -v squeue >/dev/null || return 0
    jobs=$(squeue -h -o %i 2>/dev/null | paste -sd' ' -) || return 0
    [[ -n $jobs ]] || return 0
    log "cancelling jobs still queued or running: $jobs"
    # shellcheck disable=SC2086 # one argument per job id
    scancel $jobs 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do  # up to 10 s
        [[ -z $(squeue -h -o %i 2>/dev/null) ]] && break
        sleep 0.1
    done
}

do_down() {
    local name
    cancel_jobs
    for name in "${STOP_ORDER[@]}"; do
        stop_daemon "$name"
    done
}

cmd_down() {
    if [[ ! -d $RUN ]]; then
        log "nothing to stop ($DIR has no run folder)"
        return 0
    fi
    exec 9>"$DIR/.lock"
    flock -w 900 9 || die "another local_slurm.sh holds $DIR/.lock"
    do_down
    log "cluster down"
}

cmd_status() {
    local name pid ok=0
    for name in "${STOP_ORDER[@]}"; do
        if pid=$(daemon_pid "$name"); then
            printf '%-10s running (pid %s)\n' "$name" "$pid"
        else
            printf '%-10s stopped\n' "$name"
            ok=1
        fi
    done
    echo "SLURM_CONF=$SLURM_CONF_FILE"
    if is_running slurmctld && command -v sinfo >/dev/null; then
        sinfo -N -p debug -o '%N %P %t %c %G' || ok=1
        [[ $(usable_node_count) == 2 ]] || ok=1
    else
        echo "sinfo: slurmctld is not running"
        ok=1
    fi
    if ((ok == 0)); then echo "cluster: up"; else echo "cluster: not usable"; fi
    return "$ok"
}

main() {
    (($# == 1)) || { usage; exit 2; }
    case $1 in
        up)
            # Everything goes to stderr except the final export line, which goes to the saved stdout (fd 3).
            exec 3>&1 1>&2
            do_up
            ;;
        down) cmd_down >&2 ;;
        status) cmd_status ;;
        -h | --help) usage; exit 0 ;;
        *) usage; exit 2 ;;
    esac
}

main "$@"
