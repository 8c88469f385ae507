#!/usr/bin/env bash
# zookeeper.sh — run Debian's ZooKeeper (package `zookeeper`, 3.8) on loopback for zkbridge's
# tests and demo. Every server gets its own fresh data dir; nothing touches /etc/zookeeper or
# /var/lib/zookeeper, and nothing listens beyond 127.0.0.1.
#
#   scripts/zookeeper.sh start    [--port 2181] [--dir DIR]        standalone server
#   scripts/zookeeper.sh ensemble [--port 2181] [--dir DIR]        3 nodes: client ports PORT, PORT+1, PORT+2
#   scripts/zookeeper.sh stop     [--dir DIR]                      stops every server started in DIR
#   scripts/zookeeper.sh status   [--dir DIR]                      prints each server's `srvr` answer
#   scripts/zookeeper.sh install                                   apt-get install zookeeper when missing
#
# --parent PID (start, ensemble) stops the servers when process PID exits: test binaries pass
# their own pid, so a test process that panics or is killed leaves no ZooKeeper behind.
#
# `start` and `ensemble` return once every server answers `ruok` with `imok` (or fail after
# ZK_START_TIMEOUT seconds, default 60) and print the connect string on stdout.
#
# Each server's JVM gets ZK_HEAP of heap (default 512m), then SERVER_JVMFLAGS and JVMFLAGS as
# ZooKeeper's own zkServer.sh passes them (word-split; a later -Xmx wins). ZooKeeper keeps its
# last 500 transactions in memory (zookeeper.commitLogCount): 256m was too small once a test
# committed offsets of 1,000 partitions at a time (docs/benchmarks.md, issue 3).
#
# ZK_TICK_MS is the servers' tickTime (default 500). A session expires at the first tick after
# its timeout, so the tick adds up to one tick to every crash failover of a bridge
# (docs/several-bridges.md, the paragraph on tickTime); initLimit and syncLimit are counted in
# ticks and are set from it so that they stay 10 s and 5 s whatever the tick.
set -euo pipefail

ZK_JAR=${ZK_JAR:-/usr/share/java/zookeeper.jar}
# The Debian jar's manifest carries its whole classpath; the log4j/slf4j binding is not in it,
# so the server logs through slf4j's no-op binding unless ZK_CLASSPATH adds one.
ZK_CLASSPATH=${ZK_CLASSPATH:-$ZK_JAR}
ZK_START_TIMEOUT=${ZK_START_TIMEOUT:-60}
ZK_HEAP=${ZK_HEAP:-512m}
ZK_TICK_MS=${ZK_TICK_MS:-500}

die() { echo "zookeeper.sh: $*" >&2; exit 1; }

case "$ZK_TICK_MS" in '' | *[!0-9]* | 0*) die "ZK_TICK_MS must be a positive number of milliseconds, not '$ZK_TICK_MS'" ;; esac

cmd=${1:-}
[ -n "$cmd" ] || die "usage: $0 start|ensemble|stop|status|install [--port P] [--dir DIR]"
shift
port=2181
parent=""
dir=${ZK_DIR:-${TMPDIR:-/tmp}/zkbridge-zookeeper}
while [ $# -gt 0 ]; do
  case "$1" in
    --port) port=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --parent) parent=$2; shift 2 ;;
    *) die "unknown argument $1" ;;
  esac
done

install_zk() {
  if [ -f "$ZK_JAR" ] && command -v java >/dev/null 2>&1; then return 0; fi
  command -v apt-get >/dev/null 2>&1 || die "ZooKeeper is not installed ($ZK_JAR missing) and apt-get is not available"
  echo "zookeeper.sh: installing Debian's zookeeper package" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zookeeper >/dev/null ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zookeeper >/dev/null; } ||
    die "apt-get install zookeeper failed"
}

# four-letter word over bash's /dev/tcp: no nc needed.
fourlw() { # port word
  local p=$1 w=$2
  exec 3<>"/dev/tcp/127.0.0.1/$p" 2>/dev/null || return 1
  printf '%s' "$w" >&3
  timeout 2 cat <&3 || true
  exec 3<&- 3>&-
}

wait_ok() { # port pidfile
  local p=$1 pidf=$2 deadline=$((SECONDS + ZK_START_TIMEOUT))
  while [ $SECONDS -lt $deadline ]; do
    if ! kill -0 "$(cat "$pidf")" 2>/dev/null; then
      echo "zookeeper.sh: server on port $p exited; its log:" >&2
      tail -n 30 "$(dirname "$pidf")/zookeeper.log" >&2 || true
      return 1
    fi
    # In an ensemble `ruok` answers before a quorum exists; `srvr` names a mode only once it does.
    if fourlw "$p" srvr 2>/dev/null | grep -q '^Mode:'; then return 0; fi
    sleep 0.2
  done
  echo "zookeeper.sh: server on port $p did not answer within ${ZK_START_TIMEOUT}s" >&2
  return 1
}

# launch one server: node dir, client port, optional server list lines
launch() { # nodedir clientport myid serverlines
  local nd=$1 p=$2 myid=$3 servers=$4
  mkdir -p "$nd/data"
  {
    echo "tickTime=$ZK_TICK_MS"
    echo "initLimit=$(( (10000 + ZK_TICK_MS - 1) / ZK_TICK_MS ))"
    echo "syncLimit=$(( (5000 + ZK_TICK_MS - 1) / ZK_TICK_MS ))"
    echo "dataDir=$nd/data"
    echo "clientPort=$p"
    echo "clientPortAddress=127.0.0.1"
    echo "admin.enableServer=false"
    echo "4lw.commands.whitelist=ruok,srvr,stat,mntr,cons"
    echo "maxClientCnxns=0"
    echo "jute.maxbuffer=4194304"
    # tests create many sessions quickly; keep the session bounds at ZooKeeper's defaults
    # (2..20 ticks) except a floor low enough for expiry tests.
    echo "minSessionTimeout=1000"
    echo "maxSessionTimeout=60000"
    [ -n "$servers" ] && printf '%s\n' "$servers"
    # ZK_EXTRA_CFG: more zoo.cfg lines, e.g. a secureClientPort with its TLS settings.
    [ -n "${ZK_EXTRA_CFG:-}" ] && printf '%s\n' "$ZK_EXTRA_CFG"
    true
  } >"$nd/zoo.cfg"
  [ -n "$servers" ] && echo "$myid" >"$nd/data/myid"
  # setsid: the server gets its own process group, so `stop` kills exactly what we started.
  # shellcheck disable=SC2086 # the JVM flag variables are lists of flags, as in zkServer.sh
  setsid java -Xmx"$ZK_HEAP" -XX:+UseSerialGC -Dzookeeper.jmx.log4j.disable=true ${SERVER_JVMFLAGS:-} ${JVMFLAGS:-} \
    -cp "$ZK_CLASSPATH" org.apache.zookeeper.server.quorum.QuorumPeerMain "$nd/zoo.cfg" \
    >"$nd/zookeeper.log" 2>&1 </dev/null &
  echo $! >"$nd/pid"
}

start() { # n
  local n=$1 i servers="" connect=""
  install_zk
  [ -e "$dir" ] && [ -n "$(ls -A "$dir" 2>/dev/null)" ] && {
    stop_all
    rm -rf "$dir"
  }
  mkdir -p "$dir"
  if [ "$n" -gt 1 ]; then
    for i in $(seq 1 "$n"); do
      # peer and election ports live far from the client ports to avoid clashes
      servers+="server.$i=127.0.0.1:$((port + 1000 + i)):$((port + 2000 + i))"$'\n'
    done
  fi
  for i in $(seq 1 "$n"); do
    launch "$dir/node$i" $((port + i - 1)) "$i" "${servers%$'\n'}"
  done
  for i in $(seq 1 "$n"); do
    wait_ok $((port + i - 1)) "$dir/node$i/pid" || { stop_all; exit 1; }
    connect+="${connect:+,}127.0.0.1:$((port + i - 1))"
  done
  if [ -n "$parent" ]; then
    # A watchdog of its own session: it outlives this script and stops the servers (and
    # removes their data) once the parent process is gone.
    setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done; "$2" stop --dir "$3"; rm -rf "$3"' \
      _ "$parent" "$(readlink -f "$0")" "$dir" >/dev/null 2>&1 </dev/null &
  fi
  echo "$connect"
}

stop_all() {
  local pidf pid
  for pidf in "$dir"/node*/pid; do
    [ -f "$pidf" ] || continue
    pid=$(cat "$pidf")
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL -- "-$pid" 2>/dev/null || true
    fi
    rm -f "$pidf"
  done
}

status() {
  local nd p found=0
  for nd in "$dir"/node*; do
    [ -f "$nd/zoo.cfg" ] || continue
    found=1
    p=$(sed -n 's/^clientPort=//p' "$nd/zoo.cfg")
    if out=$(fourlw "$p" srvr 2>/dev/null) && [ -n "$out" ]; then
      echo "127.0.0.1:$p $(echo "$out" | grep '^Mode:')"
    else
      echo "127.0.0.1:$p not answering"
      found=2
    fi
  done
  [ $found -eq 1 ] || return 1
}

case "$cmd" in
  install) install_zk ;;
  start) start 1 ;;
  ensemble) start 3 ;;
  stop) stop_all ;;
  status) status ;;
  *) die "unknown command $cmd (start|ensemble|stop|status|install)" ;;
esac
