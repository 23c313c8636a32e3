#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, for the tests of the `slurm` launch backend.
#
#     bash scripts/local_slurm.sh start    # install the Debian packages if missing, start the daemons
#     bash scripts/local_slurm.sh status   # which daemons run, and `sinfo`
#     bash scripts/local_slurm.sh stop     # stop what start started, remove the fake GPU devices
#     bash scripts/local_slurm.sh purge    # stop, then delete the state folder (jobs, accounting)
#
# Runs as root on Debian 12 (slurm-wlm 22.05) and needs no systemd: every daemon is started by
# hand. Pieces, in start order: munged (authentication) -> fake GPU device nodes -> MariaDB ->
# slurmdbd (job accounting) -> slurmctld -> slurmd. Accounting is not optional: submitit learns
# that a job was cancelled, failed or timed out only from `sacct`; without slurmdbd such a job
# looks unfinished forever. docs/slurm.md describes the design and the measured times.
#
# Everything it writes lives in one folder, REPLICATION_SLURM_DIR (default
# /var/tmp/replication-slurm): configuration, logs (log/), SLURM's state, MariaDB's data. The only
# things placed elsewhere are symlinks /etc/slurm/{slurm,gres,slurmdbd}.conf (where every SLURM
# command looks), the runtime folder /run/munge, and the fake /dev/nvidiaN nodes; stop removes
# the symlinks and the device nodes.
#
# Settings (environment): REPLICATION_SLURM_CPUS (8), REPLICATION_SLURM_GPUS (8, fake ones),
# REPLICATION_SLURM_DB_PORT (3307), REPLICATION_SLURM_TIMEOUT (seconds per daemon, 60).
set -euo pipefail

DIR=${REPLICATION_SLURM_DIR:-/var/tmp/replication-slurm}
CPUS=${REPLICATION_SLURM_CPUS:-8}
FAKE_GPUS=${REPLICATION_SLURM_GPUS:-8}
DB_PORT=${REPLICATION_SLURM_DB_PORT:-3307}
TIMEOUT=${REPLICATION_SLURM_TIMEOUT:-60}
CLUSTER=replication
PARTITION=local
NODE=$(hostname -s)

ETC=$DIR/etc            # the real configuration files (symlinked from /etc/slurm)
LOG=$DIR/log            # every daemon's log
RUN=$DIR/run            # pid files of the SLURM daemons, the list of device nodes we made
SPOOL=$DIR/spool        # slurmctld's saved state and slurmd's spool
DB=$DIR/mariadb         # MariaDB's data; kept with spool/ (see purge)
MLOG=$LOG/mariadb       # owned by mysql: mariadbd writes its pid file and error log after it
                        # drops root, so a root-owned folder makes it exit without any log
MUNGELOG=$LOG/munge     # owned by munge, for the same reason
PACKAGES=(slurm-wlm slurmdbd munge mariadb-server mariadb-client)
MARK="# written by scripts/local_slurm.sh"

say() { echo "local_slurm: $*"; }

die() {  # die MESSAGE [LOGFILE]: print the message and the tail of the daemon's log, exit 1
    echo "local_slurm: ERROR: $1" >&2
    if [ -n "${2:-}" ] && [ -f "$2" ]; then
        echo "--- last lines of $2 ---" >&2
        tail -n 30 "$2" >&2
    fi
    echo "local_slurm: \`bash scripts/local_slurm.sh stop\` stops whatever did start" >&2
    exit 1
}

pid_alive() {  # pid_alive PIDFILE: the process named in PIDFILE is running
    [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

wait_for() {  # wait_for WHAT LOGFILE PID COMMAND...: retry COMMAND until it succeeds; fail
    # after TIMEOUT seconds, or at once when the daemon's process PID (if not "-") has exited
    local what=$1 log=$2 pid=$3 t0=$SECONDS
    shift 3
    until "$@" >/dev/null 2>&1; do
        if [ "$pid" != - ] && ! kill -0 "$pid" 2>/dev/null; then
            die "$what exited during start-up" "$log"
        fi
        if (( SECONDS - t0 >= TIMEOUT )); then
            die "$what did not come up within ${TIMEOUT}s" "$log"
        fi
        sleep 0.2
    done
}

pid_of() { if [ -s "$1" ]; then cat "$1"; else echo -; fi; }  # pid_of PIDFILE

# ------------------------------------------------------------------------------------ install
install_packages() {
    local missing=0 cmd
    for cmd in slurmctld slurmd slurmdbd sacct sacctmgr munged mariadbd mariadb-install-db mariadb; do
        command -v "$cmd" >/dev/null 2>&1 || missing=1
    done
    [ "$missing" = 0 ] && return 0
    say "installing ${PACKAGES[*]} (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >"$DIR/apt.log" 2>&1 \
        || die "apt-get install failed" "$DIR/apt.log"
}

# ------------------------------------------------------------------------------------ munge
munge_works() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

start_munge() {
    if munge_works; then return 0; fi     # a munged already serves this machine: use it
    if [ ! -s /etc/munge/munge.key ]; then
        mungekey --create --keyfile=/etc/munge/munge.key
    fi
    # munged refuses a key that anyone but its owner can read
    chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
    # without systemd nothing creates the socket folder (systemd-tmpfiles does, normally)
    install -d -o munge -g munge -m 755 /run/munge
    install -d -o munge -g munge -m 700 "$MUNGELOG"
    runuser -u munge -- munged --log-file="$MUNGELOG/munged.log" --pid-file="$MUNGELOG/munged.pid"
    touch "$RUN/munged.ours"          # so that stop ends only a munged that this script started
    wait_for munged "$MUNGELOG/munged.log" "$(pid_of "$MUNGELOG/munged.pid")" munge_works
}

# ------------------------------------------------------------------------------------ GPUs
# gres/gpu needs a device file per GPU (slurmd checks they exist). Where no NVIDIA driver is
# loaded we make character devices with the driver's numbers (major 195, minor N): nothing can
# open them, but SLURM only needs them to exist to hand out GPU ids and set CUDA_VISIBLE_DEVICES.
# Where a driver is loaded, the real /dev/nvidiaN are declared instead and nothing is made.
GPU_FILES=()
setup_gpus() {
    local i f
    if [ -e /proc/driver/nvidia ]; then
        for f in /dev/nvidia[0-9]*; do [ -c "$f" ] && GPU_FILES+=("$f"); done
        return 0
    fi
    for (( i = 0; i < FAKE_GPUS; i++ )); do
        f=/dev/nvidia$i
        if [ ! -e "$f" ]; then
            mknod "$f" c 195 "$i"
            echo "$f" >>"$RUN/devices"      # stop removes exactly these
        fi
        GPU_FILES+=("$f")
    done
}

# ------------------------------------------------------------------------------------ MariaDB
mariadb_sql() { mariadb --no-defaults --socket="$MLOG/mysqld.sock" -u root "$@"; }

start_mariadb() {
    install -d -o mysql -g mysql -m 750 "$MLOG" "$DB"
    pid_alive "$MLOG/mariadb.pid" && return 0
    if [ ! -d "$DB/mysql" ]; then
        # root@localhost authenticates through the unix socket (we are root): no password to keep
        mariadb-install-db --no-defaults --user=mysql --datadir="$DB" --skip-test-db \
            --auth-root-authentication-method=socket >"$LOG/mariadb-install.log" 2>&1 \
            || die "mariadb-install-db failed" "$LOG/mariadb-install.log"
    fi
    # --no-defaults: ignore /etc/mysql (its socket folder /run/mysqld does not exist here).
    # Bound to 127.0.0.1 on its own port, so it neither meets the network nor a system MariaDB.
    # --skip-name-resolve: a TCP client from 127.0.0.1 is the host '127.0.0.1', no DNS lookup.
    # innodb_lock_wait_timeout=900: slurmdbd warns at start-up about anything lower.
    setsid mariadbd --no-defaults --user=mysql --datadir="$DB" \
        --pid-file="$MLOG/mariadb.pid" --log-error="$MLOG/error.log" \
        --socket="$MLOG/mysqld.sock" --bind-address=127.0.0.1 --port="$DB_PORT" \
        --skip-name-resolve --innodb-lock-wait-timeout=900 </dev/null >/dev/null 2>&1 &
    wait_for MariaDB "$MLOG/error.log" $! mariadb-admin --no-defaults --socket="$MLOG/mysqld.sock" ping
    # a password for slurmdbd's database user, made once; the server only listens on 127.0.0.1
    if [ ! -s "$ETC/db-password" ]; then
        (umask 077; head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$ETC/db-password")
    fi
    local pw
    pw=$(cat "$ETC/db-password")
    mariadb_sql -e "
        CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$pw';
        ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$pw';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" \
        || die "could not create slurmdbd's database user" "$MLOG/error.log"
}

# ------------------------------------------------------------------------------------ config
link_conf() {  # link_conf NAME: /etc/slurm/NAME -> $ETC/NAME, refusing to replace a foreign file
    local target=/etc/slurm/$1
    if [ -e "$target" ] && [ "$(readlink -f "$target")" != "$ETC/$1" ]; then
        die "$target exists and is not ours; this script does not touch a real cluster's configuration"
    fi
    ln -sfn "$ETC/$1" "$target"
}

write_config() {
    local mem_mb real_mem gres_line="" gres_conf=""
    mem_mb=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)
    real_mem=$(( mem_mb * 8 / 10 ))    # leave a fifth of the memory to the daemons and the tests
    if (( ${#GPU_FILES[@]} > 0 )); then
        gres_line="Gres=gpu:${#GPU_FILES[@]}"
        # one line per device file: GPU index i is the i-th line (CUDA_VISIBLE_DEVICES=i)
        gres_conf=$(for f in "${GPU_FILES[@]}"; do echo "Name=gpu File=$f"; done)
    fi
    install -d -m 755 /etc/slurm "$ETC"
    cat >"$ETC/slurm.conf" <<EOF
$MARK; edit the script, not this file
ClusterName=$CLUSTER
# The controller and the node are this machine; 127.0.0.1 so that no name lookup is needed.
SlurmctldHost=$NODE(127.0.0.1)
# Every daemon runs as root: there is no systemd here to start them as a service user.
SlurmUser=root
AuthType=auth/munge
# A requeued job waits this long (default 120 s) before it may start again: 10 s keeps the
# requeue test short. It is also the job credential's lifetime, ample on one idle node.
AuthInfo=cred_expire=10
StateSaveLocation=$SPOOL/ctld
SlurmdSpoolDir=$SPOOL/d
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups without systemd: track processes through /proc, no task binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
# Allocate cores and memory (not whole nodes), so several jobs share the node ...
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# ... and a job that asks for no memory gets its share per CPU instead of the whole node.
DefMemPerCPU=$(( real_mem / CPUS ))
MpiDefault=none
# Backfill every 5 s (default 30 s): a requeued job, eligible again after cred_expire, otherwise
# waits up to 30 s more for the next pass. Cheap with one node and a handful of jobs.
SchedulerParameters=bf_interval=5
# A job past its time limit is killed 5 s after SIGTERM (default 30 s) so the tests stay short.
KillWait=5
# The node re-enters service by itself after a restart (even if it was marked down).
ReturnToService=2
# Fake (or real) GPUs as generic resources; slurmd sets CUDA_VISIBLE_DEVICES per job.
GresTypes=gpu
# Job accounting through slurmdbd; gres/gpu so that sacct's AllocTRES shows gres/gpu=N.
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStorageTRES=gres/gpu
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
JobCompType=jobcomp/none
# slurmd takes the node's CPUs and memory from this file rather than from the hardware: more CPUs
# are declared than the machine has, so that several one-CPU test jobs run side by side.
SlurmdParameters=config_overrides
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$real_mem $gres_line State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
    printf '%s\n%s\n' "$MARK" "$gres_conf" >"$ETC/gres.conf"
    # slurmdbd refuses a configuration (it holds the database password) that is not owned by
    # SlurmUser with mode 600.
    (umask 077; cat >"$ETC/slurmdbd.conf" <<EOF
$MARK; edit the script, not this file
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
SlurmUser=root
LogFile=$LOG/slurmdbd.log
PidFile=$RUN/slurmdbd.pid
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$(cat "$ETC/db-password")
StorageLoc=slurm_acct_db
EOF
    )
    chown root:root "$ETC/slurmdbd.conf" && chmod 600 "$ETC/slurmdbd.conf"
    link_conf slurm.conf
    link_conf gres.conf
    link_conf slurmdbd.conf
}

# ------------------------------------------------------------------------------------ SLURM
cluster_registered() { sacctmgr -n -P list cluster format=cluster | grep -qx "$CLUSTER"; }

start_slurm() {
    if ! pid_alive "$RUN/slurmdbd.pid"; then
        slurmdbd || die "slurmdbd failed to start" "$LOG/slurmdbd.log"
    fi
    wait_for slurmdbd "$LOG/slurmdbd.log" "$(pid_of "$RUN/slurmdbd.pid")" sacctmgr -n list cluster
    # slurmctld registers with slurmdbd under its ClusterName, which must exist there first
    if ! cluster_registered; then
        sacctmgr -i add cluster "$CLUSTER" >/dev/null
    fi
    if ! pid_alive "$RUN/slurmctld.pid"; then
        # no -c: the saved state (and its job id counter) is recovered, so job ids continue
        # after a restart instead of repeating ids the accounting database already holds
        slurmctld || die "slurmctld failed to start" "$LOG/slurmctld.log"
    fi
    wait_for slurmctld "$LOG/slurmctld.log" "$(pid_of "$RUN/slurmctld.pid")" scontrol ping
    if ! pid_alive "$RUN/slurmd.pid"; then
        slurmd || die "slurmd failed to start" "$LOG/slurmd.log"
    fi
    wait_for "node $NODE" "$LOG/slurmd.log" "$(pid_of "$RUN/slurmd.pid")" node_ready
}

node_ready() {  # the node accepts jobs: idle, mixed or allocated (not down, drained, unknown)
    sinfo -h -n "$NODE" -o %T | grep -Eq '^(idle|mixed|allocated)$'
}

all_running() {
    munge_works && pid_alive "$MLOG/mariadb.pid" && pid_alive "$RUN/slurmdbd.pid" \
        && pid_alive "$RUN/slurmctld.pid" && pid_alive "$RUN/slurmd.pid"
}

summary() {
    say "logs in $LOG/"
    sinfo -h -o 'partition %P %a: %D node %T, %c CPUs, %m MB, %G' | sed 's/^/local_slurm: sinfo: /'
}

cmd_start() {
    [ "$(id -u)" = 0 ] || die "run as root (it installs packages and starts daemons)"
    install -d -m 755 "$DIR" "$LOG" "$RUN" "$SPOOL" "$ETC"
    if command -v sinfo >/dev/null && all_running && node_ready; then
        say "already running (nothing to do)"
        summary
        return 0
    fi
    install_packages
    start_munge
    setup_gpus
    start_mariadb
    write_config
    start_slurm
    say "started: cluster $CLUSTER, node $NODE, $CPUS CPUs, ${#GPU_FILES[@]} GPUs"
    summary
}

stop_pid() {  # stop_pid NAME PIDFILE: SIGTERM, then SIGKILL after TIMEOUT seconds
    local name=$1 pidfile=$2 pid t0=$SECONDS
    pid_alive "$pidfile" || return 0
    pid=$(cat "$pidfile")
    kill -TERM "$pid"
    while kill -0 "$pid" 2>/dev/null; do
        if (( SECONDS - t0 >= TIMEOUT )); then
            say "$name did not stop within ${TIMEOUT}s: SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            break
        fi
        sleep 0.2
    done
    say "stopped $name"
}

cancel_jobs() {  # cancel every job and wait for them to end: a job step outlives slurmd
    local ids t0=$SECONDS
    pid_alive "$RUN/slurmctld.pid" || return 0
    ids=$(squeue -h -o %A 2>/dev/null) || return 0
    [ -n "$ids" ] || return 0
    say "cancelling $(echo "$ids" | wc -l) job(s)"
    # shellcheck disable=SC2086
    scancel $ids 2>/dev/null || true
    while [ -n "$(squeue -h -o %A 2>/dev/null)" ] && (( SECONDS - t0 < TIMEOUT )); do sleep 0.5; done
}

cmd_stop() {
    # jobs first: their processes (slurmstepd and below) would otherwise keep running after
    # slurmd is gone. slurmctld saves its state (the job id counter) on SIGTERM.
    cancel_jobs
    stop_pid slurmd "$RUN/slurmd.pid"
    stop_pid slurmctld "$RUN/slurmctld.pid"
    stop_pid slurmdbd "$RUN/slurmdbd.pid"
    stop_pid MariaDB "$MLOG/mariadb.pid"
    if [ -f "$RUN/munged.ours" ]; then
        stop_pid munged "$MUNGELOG/munged.pid"
        rm -f "$RUN/munged.ours"
    fi
    if [ -f "$RUN/devices" ]; then
        xargs rm -f <"$RUN/devices"
        say "removed $(wc -l <"$RUN/devices") fake GPU device nodes"
        rm -f "$RUN/devices"
    fi
    local f
    for f in slurm.conf gres.conf slurmdbd.conf; do
        if [ -L "/etc/slurm/$f" ] && [ "$(readlink "/etc/slurm/$f")" = "$ETC/$f" ]; then
            rm -f "/etc/slurm/$f"
        fi
    done
    say "stopped (state and logs kept in $DIR)"
}

cmd_status() {
    local rc=0
    check() { if "${@:2}"; then say "$1: running"; else say "$1: not running"; rc=3; fi; }
    check munged munge_works
    check MariaDB pid_alive "$MLOG/mariadb.pid"
    check slurmdbd pid_alive "$RUN/slurmdbd.pid"
    check slurmctld pid_alive "$RUN/slurmctld.pid"
    check slurmd pid_alive "$RUN/slurmd.pid"
    if [ "$rc" = 0 ]; then summary; fi
    return "$rc"
}

case "${1:-}" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    purge)
        # SLURM's state (the job id counter) and the accounting database go together: wiping
        # only the state restarts job ids at 1 and `sacct -j N` then returns several jobs.
        cmd_stop
        rm -rf "$DIR"
        say "deleted $DIR"
        ;;
    *) echo "usage: $0 start|stop|status|purge" >&2; exit 2 ;;
esac
