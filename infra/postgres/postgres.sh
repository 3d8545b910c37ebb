#!/usr/bin/env bash
# A throwaway local PostgreSQL for tests and the demo, from Debian's packages.
#
#   postgres.sh install   apt-get install postgresql when its binaries are missing
#   postgres.sh start     initdb on first use, start on loopback, create role/db srpo
#   postgres.sh stop | status | url
#
# Environment: SRPO_PG_DIR (default <repo>/.srpo/postgres), SRPO_PG_PORT (55432).
# PostgreSQL refuses to run as root, so as root the server runs as the `postgres` user.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
DIR="${SRPO_PG_DIR:-$REPO/.srpo/postgres}"
PORT="${SRPO_PG_PORT:-55432}"
DATA="$DIR/data"
URL="postgres://srpo:srpo@127.0.0.1:$PORT/srpo"

log() { echo "[postgres] $*" >&2; }

bindir() {
  local d
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    [[ -x "$d/pg_ctl" ]] && { echo "$d"; return 0; }
  done
  return 1
}

as_owner() {
  if [[ $(id -u) -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

install() {
  if bindir >/dev/null; then return 0; fi
  LOG_TAG=postgres
  . "$HERE/../lib/privileged.sh"
  privileged "PostgreSQL (the PostgreSQL store tests need it)" "apt-get install postgresql" || exit 3
  log "installing PostgreSQL from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >&2 || true
  $SUDO apt-get install -y -qq postgresql >&2
}

start() {
  local bin; bin=$(bindir) || { log "PostgreSQL binaries not found; run: $0 install"; exit 1; }
  mkdir -p "$DIR"
  if [[ $(id -u) -eq 0 ]]; then
    id postgres >/dev/null 2>&1 || useradd --system --home "$DIR" postgres
    chown postgres "$DIR"
  fi
  if [[ ! -f "$DATA/PG_VERSION" ]]; then
    log "initdb in $DATA"
    as_owner "$bin/initdb" -D "$DATA" -U postgres --auth=trust -E UTF8 >"$DIR/initdb.log" 2>&1 || { cat "$DIR/initdb.log" >&2; exit 1; }
  fi
  if as_owner "$bin/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
    log "already running on 127.0.0.1:$PORT"
  else
    as_owner "$bin/pg_ctl" -D "$DATA" -l "$DIR/server.log" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -p $PORT -k $DIR -c fsync=off -c max_connections=100" start >&2
  fi
  as_owner "$bin/psql" -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 -q <<'SQL' >&2
DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'srpo') THEN CREATE ROLE srpo LOGIN PASSWORD 'srpo' CREATEDB; END IF;
END $$;
SQL
  if ! as_owner "$bin/psql" -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname='srpo'" | grep -q 1; then
    as_owner "$bin/psql" -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -q -c "CREATE DATABASE srpo OWNER srpo" >&2
  fi
  log "ready: $URL"
}

stop() {
  local bin; bin=$(bindir) || exit 0
  [[ -f "$DATA/PG_VERSION" ]] || { log "not initialised"; return 0; }
  as_owner "$bin/pg_ctl" -D "$DATA" -m fast -w stop >&2 || true
}

status() {
  local bin; bin=$(bindir) || { echo "not installed"; return 1; }
  if [[ -f "$DATA/PG_VERSION" ]] && as_owner "$bin/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then echo "running $URL"; return 0; fi
  echo "stopped"; return 1
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  status) status ;;
  url) echo "$URL" ;;
  *) echo "usage: $0 install|start|stop|status|url" >&2; exit 2 ;;
esac
