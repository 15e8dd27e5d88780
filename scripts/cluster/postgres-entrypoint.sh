#!/bin/sh
# The official postgres image's interface (docker-library/postgres, docker-entrypoint.sh), the
# part a chart relies on: POSTGRES_PASSWORD (required), POSTGRES_USER (default postgres),
# POSTGRES_DB (default POSTGRES_USER), PGDATA (default /var/lib/postgresql/data), and on the
# first start every *.sql and *.sh of /docker-entrypoint-initdb.d in name order, against a
# server that listens on no address; then the server on port 5432 with scram-sha-256 for every
# address. Runs as the user it is started as (uid 70 here, as in the alpine image).
set -eu
: "${PGDATA:=/var/lib/postgresql/data}"
: "${POSTGRES_USER:=postgres}"
: "${POSTGRES_DB:=$POSTGRES_USER}"
export PGDATA

if [ ! -s "$PGDATA/PG_VERSION" ]; then
  if [ -z "${POSTGRES_PASSWORD:-}" ]; then
    echo "error: POSTGRES_PASSWORD is not set; the database would have no superuser password" >&2
    exit 1
  fi
  mkdir -p "$PGDATA"
  chmod 700 "$PGDATA"
  pwfile=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
  initdb --username="$POSTGRES_USER" --pwfile="$pwfile" --encoding=UTF8 --locale=C \
    --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm -f "$pwfile"
  printf 'host all all all scram-sha-256\n' >>"$PGDATA/pg_hba.conf"
  pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
  if [ "$POSTGRES_DB" != postgres ]; then
    psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --no-password --dbname postgres \
      -c "CREATE DATABASE \"$POSTGRES_DB\"" >/dev/null
  fi
  for f in /docker-entrypoint-initdb.d/*; do
    case $f in
      *.sql)
        echo "running $f"
        psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --no-password \
          --dbname "$POSTGRES_DB" -f "$f" >/dev/null
        ;;
      *.sh)
        echo "running $f"
        . "$f"
        ;;
      *) ;;
    esac
  done
  pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
  echo "PostgreSQL init process complete; ready for start up."
fi
exec postgres -c listen_addresses='*' "$@"
