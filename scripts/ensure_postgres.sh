#!/usr/bin/env bash
# Make sure PostgreSQL answers on 127.0.0.1:5432 (start it if this machine has it stopped) and that
# the database `test` exists. Used by .ci/run before the sweep tests. Exit 0 when reachable.
set -u
HOST=${PGHOST_CHECK:-127.0.0.1}
PORT=${PGPORT_CHECK:-5432}

ready() {
  if command -v pg_isready >/dev/null 2>&1; then
    pg_isready -q -h "$HOST" -p "$PORT"
  else
    (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null
  fi
}

as_postgres() {  # run a command as the postgres OS user when we are root
  if [ "$(id -u)" = 0 ] && id postgres >/dev/null 2>&1; then
    if command -v runuser >/dev/null 2>&1; then runuser -u postgres -- "$@"; else su postgres -c "$*"; fi
  else
    "$@"
  fi
}

if ! ready; then
  echo "ensure_postgres: nothing on $HOST:$PORT, starting PostgreSQL" >&2
  started=0
  if command -v pg_lsclusters >/dev/null 2>&1; then
    while read -r ver name _; do
      [ -n "$ver" ] || continue
      pg_ctlcluster "$ver" "$name" start >/dev/null 2>&1 && started=1
    done < <(pg_lsclusters -h 2>/dev/null | awk '{print $1, $2}')
  fi
  if [ "$started" = 0 ] && command -v service >/dev/null 2>&1; then
    service postgresql start >/dev/null 2>&1 && started=1
  fi
  if [ "$started" = 0 ] && command -v systemctl >/dev/null 2>&1; then
    systemctl start postgresql >/dev/null 2>&1 && started=1
  fi
  for _ in $(seq 1 30); do ready && break; sleep 1; done
fi

if ! ready; then
  echo "ensure_postgres: PostgreSQL is not reachable on $HOST:$PORT" >&2
  exit 1
fi

if command -v psql >/dev/null 2>&1; then
  for user in postgres root; do
    if psql -h "$HOST" -p "$PORT" -U "$user" -d postgres -tAc "select 1" >/dev/null 2>&1; then
      if [ "$(psql -h "$HOST" -p "$PORT" -U "$user" -d postgres -tAc "select 1 from pg_database where datname='test'")" != 1 ]; then
        psql -h "$HOST" -p "$PORT" -U "$user" -d postgres -qc "create database test" >/dev/null 2>&1 || true
      fi
      break
    fi
  done
fi
echo "ensure_postgres: PostgreSQL reachable on $HOST:$PORT" >&2
exit 0
