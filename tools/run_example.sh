#!/usr/bin/env bash
# The example project's processes, as `make example` runs them: inside
#   python -m tools.servers run --redis -- tools/run_example.sh
# which provides a private Redis in DELAYQ_REDIS_URL, with the virtualenv's
# bin directory first on PATH. Ctrl-C stops honcho, which stops its processes.
set -euo pipefail

cd "$(dirname "$(realpath "$0")")/.."

: "${DELAYQ_REDIS_URL:?run through: python -m tools.servers run --redis -- $0}"
port=${EXAMPLE_PORT:-8000}
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
# honcho hands each process type its own PORT, counting up from --port, so
# the first entry of the Procfile (web) gets exactly $port.
exec honcho --procfile Procfile.example start --port "$port"
