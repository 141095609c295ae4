#!/usr/bin/env bash
# The example project's processes, as `make example` runs them: inside
#   python -m tools.servers run --redis -- tools/run_example.sh
# which provides a private Redis in DELAYQ_REDIS_URL, with the virtualenv's
# bin directory first on PATH. Ctrl-C stops honcho, which stops its processes.
set -euo pipefail

cd "$(dirname "$(realpath "$0")")/.."

: "${DELAYQ_REDIS_URL:?run through: python -m tools.servers run --redis -- $0}"
port=${EXAMPLE_PORT:-8000}
# Unpaid orders are cancelled after a minute, so the demo shows it happen.
export SHOP_ORDER_CANCEL_DELAY=${SHOP_ORDER_CANCEL_DELAY:-60}

python example_project/manage.py migrate --noinput
printf '\n  Open http://127.0.0.1:%s/   (Ctrl-C stops everything)\n\n' "$port"
# honcho hands each process type its own PORT, counting up from --port, so
# the first entry of the Procfile (web) gets exactly $port.
exec honcho --procfile Procfile.example start --port "$port"
