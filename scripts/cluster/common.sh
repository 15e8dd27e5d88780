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
