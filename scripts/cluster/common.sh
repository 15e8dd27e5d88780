# Sourced by scripts/cluster.sh and scripts/kind.sh: what both do around the namespaces they
# make for a test cluster. Each sets USAGE_LINES (its header comment's last line), NEEDS_ROOT
# (why it needs root) and NETNS_PREFIX first.

usage() {
  sed -n "2,${USAGE_LINES}p" "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

need_root() {
  [ "$(id -u)" = 0 ] || {
    echo "$NEEDS_ROOT" >&2
    exit 1
  }
}

# The names follow from the folder, so that two folders are two clusters: DIR, ID, NETNS
# (NETNS_PREFIX-ID), PIDS and LOGS.
folder_names() {
  DIR=$(realpath -m "$1")
  ID=$(printf '%s' "$DIR" | sha256sum | cut -c1-8)
  NETNS=$NETNS_PREFIX-$ID
  PIDS=$DIR/pids
  LOGS=$DIR/logs
}

holder_pid() { cat "$PIDS/holder.pid" 2>/dev/null || true; }

# Waits for a command to succeed, or fails naming what it waited for and its log.
wait_for() {
  local what=$1 seconds=$2 log=$3
  shift 3
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      echo "$what: not ready after ${seconds} s; the last lines of $log:" >&2
      tail -n 30 "$log" >&2 || true
      exit 1
    fi
    sleep 0.5
  done
}

# The holder: a process in the cluster's network namespace that keeps a private copy of the
# mount table, whose mounts never reach the machine's. MOUNTS is the shell that makes them ($1
# is DIR); every component is later started inside with nsenter.
start_holder() {
  setsid nsenter --net="/run/netns/$NETNS" unshare --mount --propagation private -- \
    bash -c "set -e
      $1
      touch /run/.namespaces-ready
      exec sleep infinity" _ "$DIR" >"$LOGS/holder.log" 2>&1 </dev/null &
  echo $! >"$PIDS/holder.pid"
  wait_for "the namespaces" 10 "$LOGS/holder.log" test -f "$DIR/run/.namespaces-ready"
}
