#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the tests and benchmarks:
#   scripts/pg_test_cluster.sh start STATE_DIR   initdb + start; prints the URL
#   scripts/pg_test_cluster.sh stop STATE_DIR    stop it and delete its files
# The cluster lives in a fresh temporary directory (data, unix socket, log), runs as an
# unprivileged user (when run as root: the postgres system user, else nobody), listens on a
# free loopback port and on its own unix socket, and trusts local and loopback connections.
# STATE_DIR/url holds a postgresql:// URL that reaches it over the unix socket (no TCP port
# can collide with another cluster's), STATE_DIR/tcp_url the same over loopback TCP.
# ROTE_PG_FSYNC=on keeps fsync and synchronous commits (benchmarks); tests run without.
set -euo pipefail

cmd="${1:-}"
state="${2:-}"
if [ -z "$cmd" ] || [ -z "$state" ]; then
  echo "usage: $0 start|stop STATE_DIR" >&2
  exit 2
fi

bindir="${ROTE_PG_BINDIR:-}"
if [ -z "$bindir" ]; then
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/initdb" ] && bindir="$d"
  done
fi

# As root, PostgreSQL refuses to run: run its programs as an unprivileged user.
as_user=()
run_user=""
if [ "$(id -u)" -eq 0 ]; then
  if getent passwd postgres >/dev/null; then run_user=postgres; else run_user=nobody; fi
  as_user=(runuser -u "$run_user" --)
fi

stop_cluster() {
  local dir="$1"
  [ -d "$dir" ] || return 0
  if [ -f "$dir/data/postmaster.pid" ] && [ -x "$bindir/pg_ctl" ]; then
    "${as_user[@]}" "$bindir/pg_ctl" -D "$dir/data" -m immediate -w -t 30 stop >/dev/null 2>&1 || true
  fi
  rm -rf "$dir"
}

case "$cmd" in
  start)
    if [ -z "$bindir" ] || [ ! -x "$bindir/pg_ctl" ]; then
      echo "pg_test_cluster: no PostgreSQL server binaries (initdb, pg_ctl) found; install the" \
           "postgresql package (scripts/setup.sh does) or set ROTE_PG_BINDIR" >&2
      exit 1
    fi
    mkdir -p "$state"
    if [ -f "$state/cluster" ]; then stop_cluster "$(cat "$state/cluster")"; fi
    rm -f "$state/url" "$state/tcp_url" "$state/cluster"
    # Short path: a unix socket path must fit in 107 bytes.
    dir="$(mktemp -d /tmp/rote-pg.XXXXXX)"
    echo "$dir" > "$state/cluster"
    chmod 0755 "$dir"
    [ -n "$run_user" ] && chown "$run_user" "$dir"
    "${as_user[@]}" "$bindir/initdb" -D "$dir/data" -U rote --auth=trust -E UTF8 \
      --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 || {
      cat "$dir/initdb.log" >&2
      exit 1
    }
    fsync_opts="-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
    [ "${ROTE_PG_FSYNC:-off}" = "on" ] && fsync_opts=""
    started=""
    for _ in 1 2 3 4 5 6 7 8; do
      port=$((20000 + RANDOM % 40000))
      # Someone listens there already: try another.
      if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then continue; fi
      if "${as_user[@]}" "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
           -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=300 $fsync_opts" \
           start >/dev/null 2>&1; then
        started=1
        break
      fi
    done
    if [ -z "$started" ]; then
      echo "pg_test_cluster: the server did not start; its log:" >&2
      cat "$dir/server.log" >&2 || true
      exit 1
    fi
    echo "postgresql://rote@/postgres?host=$dir&port=$port" > "$state/url"
    echo "postgresql://rote@127.0.0.1:$port/postgres" > "$state/tcp_url"
    cat "$state/url"
    ;;
  stop)
    if [ -f "$state/cluster" ]; then stop_cluster "$(cat "$state/cluster")"; fi
    rm -f "$state/url" "$state/tcp_url" "$state/cluster"
    ;;
  *)
    echo "usage: $0 start|stop STATE_DIR" >&2
    exit 2
    ;;
esac
