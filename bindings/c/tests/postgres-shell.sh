#!/usr/bin/env bash
# The shell on PostgreSQL (`tether --postgres CONNINFO --schema S --store F`),
# against the cluster scripts/with-postgres starts; run by the `postgres`
# suite. Answers are checked against psql's; exits 1 on a failure.
set -euo pipefail
: "${TETHER_PG_CONNINFO:?run under scripts/with-postgres}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
SHELL_BIN="$ROOT/bindings/c/build/tether"
WORK="$(mktemp -d)"
SCHEMA="sh_$$_$RANDOM"
sql() { psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$TETHER_PG_CONNINFO" -c "$1"; }
cleanup() { sql "DROP SCHEMA IF EXISTS $SCHEMA CASCADE" >/dev/null 2>&1 || true; rm -rf "$WORK"; }
trap cleanup EXIT
failures=0
check() { if [ "$2" != "$3" ]; then echo "FAIL: $1: got [$2], expected [$3]" >&2; failures=$((failures + 1)); fi; }
t() { "$SHELL_BIN" --postgres "$TETHER_PG_CONNINFO" --schema "$SCHEMA" --store "$WORK/s.db" "$@"; }

sql "CREATE SCHEMA $SCHEMA; CREATE TABLE $SCHEMA.items (id int8 PRIMARY KEY, title text NOT NULL, n int4);
     INSERT INTO $SCHEMA.items SELECT g, 't' || g, g % 4 FROM generate_series(1, 30) g"

check "entities" "$(t --json entities | tr -d ' \n' | grep -o '"items"' | head -1)" '"items"'
check "count with a predicate" "$(t count items --where 'n == 1' | tr -d '[:space:]')" \
      "$(sql "SELECT count(*) FROM $SCHEMA.items WHERE n = 1")"
check "info hides the conninfo" "$(t info | grep -c "$TETHER_PG_CONNINFO" || true)" "0"
check "info names the schema" "$(t info | awk '$1 == "schema" {print $2}')" "$SCHEMA"
status=0; t count nosuch >/dev/null 2>&1 || status=$?
check "an unknown entity fails" "$status" "1"
status=0; "$SHELL_BIN" --schema x --store "$WORK/s.db" info >/dev/null 2>&1 || status=$?
check "--schema without --postgres is a usage error" "$status" "2"
[ "$failures" -eq 0 ] || exit 1
echo "postgres-shell.sh: all checks passed"
