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
