#!/usr/bin/env bash
# The example project's processes, as `make example` runs them: inside
#   python -m tools.servers run --redis -- tools/run_example.sh
# which provides a private Redis in DELAYQ_REDIS_URL, with the virtualenv's
# bin directory first on PATH. The web server listens on 127.0.0.1 at
# EXAMPLE_PORT (default 8000); a port in use is refused before anything
# starts. Ctrl-C stops honcho, which stops its processes, and exits with 0:
# stopping the example is no failure.
set -euo pipefail

cd "$(dirname "$(realpath "$0")")/.."

say() { printf 'run_example: %s\n' "$*" >&2; }

: "${DELAYQ_REDIS_URL:?run through: python -m tools.servers run --redis -- $0}"
port=${EXAMPLE_PORT:-8000}
if ! [[ $port =~ ^[0-9]+$ ]] || ((10#$port < 1 || 10#$port > 65535)); then
    say "EXAMPLE_PORT must be a port number (1-65535), not '$port'."
    exit 2
fi
port=$((10#$port))
# Bound as the web server binds it (SO_REUSEADDR), so only a port another
# program holds is refused, not one a stopped server left in TIME_WAIT.
if ! python - "$port" <<'PY' 2>/dev/null; then
import socket, sys
with socket.socket() as sock:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", int(sys.argv[1])))
PY
    say "port $port on 127.0.0.1 is in use by another program."
    say "Stop it, or choose another port: make example EXAMPLE_PORT=8001"
    exit 1
fi

admin_user=${SHOP_ADMIN_USER:-admin}
admin_password=${SHOP_ADMIN_PASSWORD:-admin}
# Short delays, so the demo shows the tasks run: unpaid orders are cancelled
# after a minute, and a coupon valid for two minutes is reminded after 30 s.
export SHOP_ORDER_CANCEL_DELAY=${SHOP_ORDER_CANCEL_DELAY:-60}
export SHOP_COUPON_LIFETIME=${SHOP_COUPON_LIFETIME:-120}
export SHOP_COUPON_REMIND_BEFORE=${SHOP_COUPON_REMIND_BEFORE:-90}

manage() { python example_project/manage.py "$@"; }
manage migrate --noinput
# Idempotent: an existing user of that name is left as it is.
manage demo_superuser --username "$admin_user" --password "$admin_password"

cat <<MESSAGE

  Shop:      http://127.0.0.1:$port/
  Admin:     http://127.0.0.1:$port/admin/   (user $admin_user, password $admin_password)
  Dashboard: http://127.0.0.1:$port/admin/django_delayq/delayedtask/dashboard/

  Unpaid orders are cancelled after $SHOP_ORDER_CANCEL_DELAY s. Ctrl-C stops everything.

MESSAGE

# honcho runs in a session of its own, so that a Ctrl-C at the terminal
# reaches this script only, which then stops honcho (and honcho its
# processes) once, by its PID.
honcho_pid=""
stop() {
    trap '' INT TERM # a second Ctrl-C must not cut the shutdown short
    say "stopping"
    kill -TERM "$honcho_pid" 2>/dev/null || true
    wait "$honcho_pid" 2>/dev/null || true
    exit 0
}
trap stop INT TERM
# honcho hands each process type its own PORT, counting up from --port, so
# the first entry of the Procfile (web) gets exactly $port.
setsid honcho --procfile Procfile.example start --port "$port" &
honcho_pid=$!
# Until honcho exits by itself (a process of it failed), or a signal arrives.
wait "$honcho_pid"
