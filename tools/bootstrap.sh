#!/usr/bin/env bash
# Make this machine ready to develop and test django-delayq.
#
#   tools/bootstrap.sh [--redis-only | --no-servers] [--browser] [LEG ...]
#   tools/bootstrap.sh --refresh-constraints [LEG ...]
#
# 1. Installs the Debian packages that provide redis-server and the PostgreSQL
#    server, unless their binaries are already there (--redis-only skips
#    PostgreSQL, --no-servers skips both), and with --browser Debian's
#    chromium, which the browser tests (tests/browser) drive headless.
# 2. Creates .venv/tools, holding a pinned uv.
# 3. Creates one virtualenv per matrix LEG under .venv/LEG with the package
#    (editable, with hiredis), the "dev" dependency group, the leg's Django and
#    honcho (for `make example`), at the exact versions its constraints file
#    tools/constraints/LEG.txt pins.
#
# Idempotent and quick when nothing changed: a leg is rebuilt from scratch only
# when pyproject.toml, its constraints file or what this script installs in it
# changes.
#
# --refresh-constraints rebuilds each LEG (default: every leg) from the newest
# releases pyproject.toml allows, ignoring its constraints file, then rewrites
# that file from what got installed (`make constraints`). Commit the files: an
# upgrade of CI's dependencies is a deliberate, reviewed change.
set -euo pipefail

SCRIPT=$(realpath "$0")
cd "$(dirname "$SCRIPT")/.."

UV_VERSION=0.13.9
VENV_ROOT=.venv
TOOLS_VENV=$VENV_ROOT/tools
UV=$TOOLS_VENV/bin/uv
# What every leg gets besides its Django; honcho runs `make example`.
INSTALL_ARGS=(-e '.[hiredis]' --group dev honcho)
# Each leg installs the exact versions its file here pins, so that a CI run
# tests what the last one tested: a new release of a dependency reaches the
# legs only through a commit that refreshes these files.
CONSTRAINTS_DIR=tools/constraints
# uv must use the interpreters we pick, never fetch one.
export UV_PYTHON_DOWNLOADS=never

say() { printf 'bootstrap: %s\n' "$*"; }
die() { printf 'bootstrap: error: %s\n' "$*" >&2; exit 1; }

# The test matrix: Python version and Django requirement of each leg, and
# extra dependency groups. "bench" is no test leg: the benchmark harness and
# the peers it measures (`make bench`).
KNOWN_LEGS="py311-dj52 py312-dj6 bench"
leg_spec() {
    case "$1" in
        py311-dj52) echo "3.11 Django>=5.2.8,<6.0" ;;
        py312-dj6) echo "3.12 Django>=6.1,<6.2" ;;
        bench) echo "3.12 Django>=6.1,<6.2 bench" ;;
        *) die "unknown matrix leg '$1' (known: $KNOWN_LEGS)" ;;
    esac
}

# -- system packages ----------------------------------------------------------

apt_updated=0
added_policy=""
remove_policy() {
    if [[ -n $added_policy ]]; then
        "${sudo[@]}" rm -f "$added_policy"
        added_policy=""
    fi
}
trap remove_policy EXIT

sudo=()
apt_install() {
    if [[ $EUID -ne 0 ]]; then
        command -v sudo >/dev/null ||
            die "need root or sudo to install Debian packages: $*"
        sudo=(sudo)
    fi
    command -v apt-get >/dev/null ||
        die "apt-get not found: install these packages by hand: $*"
    # Without systemd (containers, CI) a package's service would be started as
    # a stray daemon nobody manages: deny service starts during the install.
    # Our own servers always run privately on free ports.
    local policy=/usr/sbin/policy-rc.d
    if [[ ! -d /run/systemd/system && ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
        "${sudo[@]}" chmod 755 "$policy"
        added_policy=$policy
    fi
    if [[ $apt_updated -eq 0 ]]; then
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q ||
            die "apt-get update failed"
        apt_updated=1
    fi
    say "installing Debian packages: $*"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends "$@" ||
        die "apt-get failed installing: $*"
    remove_policy
}

have_redis() {
    command -v redis-server >/dev/null || [[ -x /usr/bin/redis-server ]]
}

have_postgres() {
    local bindir
    for bindir in ${DELAYQ_PG_BINDIR:-} /usr/lib/postgresql/*/bin; do
        [[ -x $bindir/postgres && -x $bindir/initdb ]] && return 0
    done
    return 1
}

have_mariadb() {
    [[ -x /usr/sbin/mariadbd ]] || command -v mariadbd >/dev/null
}

# tests/db/test_pgbouncer.py runs the commands through it.
have_pgbouncer() {
    [[ -x /usr/sbin/pgbouncer ]] || command -v pgbouncer >/dev/null
}

# mysqlclient (the MySQL driver Django recommends) builds against these.
have_mysqlclient_headers() {
    pkg-config --exists mysqlclient 2>/dev/null || pkg-config --exists libmariadb 2>/dev/null
}

# The browser tests launch this binary: Playwright never downloads a browser.
have_chromium() {
    [[ -x /usr/bin/chromium ]]
}

install_browser() {
    [[ $1 == yes ]] || return 0
    have_chromium || apt_install chromium
    have_chromium || die "/usr/bin/chromium still missing after installing chromium"
}

install_servers() {
    local servers=$1 missing=()
    [[ $servers == none ]] && return 0
    have_redis || missing+=(redis-server)
    if [[ $servers == all ]] && ! have_postgres; then
        missing+=(postgresql)
    fi
    if [[ $servers == all ]] && ! have_mariadb; then
        missing+=(mariadb-server)
    fi
    if [[ $servers == all ]] && ! have_pgbouncer; then
        missing+=(pgbouncer)
    fi
    if [[ ${#missing[@]} -gt 0 ]]; then apt_install "${missing[@]}"; fi
    have_redis || die "redis-server still missing after installing it"
    if [[ $servers == all ]] && ! have_postgres; then
        die "PostgreSQL server binaries still missing (set DELAYQ_PG_BINDIR?)"
    fi
    if [[ $servers == all ]] && ! have_mariadb; then
        die "mariadbd still missing after installing mariadb-server"
    fi
    if [[ $servers == all ]] && ! have_pgbouncer; then
        die "pgbouncer still missing after installing it"
    fi
}

# -- interpreters -------------------------------------------------------------

# Print the path of a working python X.Y. pyenv shims exist for every
# installed version but fail unless that version is selected, so each
# candidate is run, not just looked up.
find_python() {
    local want=$1 candidate found
    local candidates=("python$want")
    local root
    root=$(pyenv root 2>/dev/null) || root=${PYENV_ROOT:-$HOME/.pyenv}
    # Newest patch release first.
    while IFS= read -r found; do
        candidates+=("$found")
    done < <(printf '%s\n' "$root"/versions/"$want".*/bin/"python$want" | sort -Vr)
    candidates+=("/usr/local/bin/python$want" "/usr/bin/python$want" python3)
    for candidate in "${candidates[@]}"; do
        found=$(command -v "$candidate" 2>/dev/null) || continue
        if [[ $("$found" -c 'import sys; print("%d.%d" % sys.version_info[:2])' \
            2>/dev/null) == "$want" ]]; then
            "$found" -c 'import sys; print(sys.executable)'
            return 0
        fi
    done
    return 1
}

# -- virtualenvs ----------------------------------------------------------------

tools_venv() {
    if [[ -x $UV && $("$UV" --version 2>/dev/null) == "uv $UV_VERSION"* ]]; then
        return 0
    fi
    say "creating $TOOLS_VENV with uv $UV_VERSION"
    rm -rf "$TOOLS_VENV"
    if ! python3 -m venv "$TOOLS_VENV" 2>/dev/null; then
        # Debian's own python3 ships venv/ensurepip separately.
        rm -rf "$TOOLS_VENV"
        apt_install python3-venv
        python3 -m venv "$TOOLS_VENV"
    fi
    "$TOOLS_VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
        "uv==$UV_VERSION"
}

# Everything that decides what a leg gets installed, and nothing else.
fingerprint() {
    local spec=$1 constraints=$2
    {
        echo "$spec uv=$UV_VERSION ${INSTALL_ARGS[*]}"
        cat pyproject.toml
        if [[ -f $constraints ]]; then cat "$constraints"; fi
    } | sha256sum | cut -d' ' -f1
}

leg_venv() {
    local leg=$1 refresh=${2:-no} spec python_version django group venv stamp want
    local interpreter start constraints
    spec=$(leg_spec "$leg")
    read -r python_version django group <<<"$spec"
    local install=("${INSTALL_ARGS[@]}")
    if [[ -n $group ]]; then install+=(--group "$group"); fi
    venv=$VENV_ROOT/$leg
    stamp=$venv/.bootstrap-stamp
    constraints=$CONSTRAINTS_DIR/$leg.txt
    if [[ $refresh == no && ! -f $constraints ]]; then
        die "$constraints is missing: create it with tools/bootstrap.sh \
--refresh-constraints $leg (make constraints), and commit it"
    fi
    want=$(fingerprint "$spec" "$constraints")
    if [[ $refresh == no && -x $venv/bin/python && -f $stamp &&
        $(<"$stamp") == "$want" ]]; then
        return 0
    fi
    # mysqlclient (dev and bench groups) compiles against MariaDB's client.
    if ! have_mysqlclient_headers; then
        apt_install default-libmysqlclient-dev pkg-config
    fi
    local others
    others=$(echo "$KNOWN_LEGS" | tr ' ' '\n' | grep -vx -e "$leg" -e bench |
        paste -sd' ')
    interpreter=$(find_python "$python_version") || die "Python $python_version \
not found (needed by the $leg leg; looked on PATH, in pyenv's versions and in \
/usr/bin). Install it, or test only the other legs: make test MATRIX='$others'"
    start=$SECONDS
    say "creating $venv ($interpreter, $django)"
    # From scratch, so that dependencies dropped from pyproject.toml go away too.
    rm -rf "$venv"
    # --seed: pip too, for trying things out by hand.
    "$UV" venv --quiet --seed --python "$interpreter" "$venv"
    if [[ $refresh == no ]]; then install+=(-c "$constraints"); fi
    "$UV" pip install --quiet --python "$venv/bin/python" "${install[@]}" \
        "$django"
    if [[ $refresh == yes ]]; then
        write_constraints "$leg" "$venv" "$constraints"
        # What was installed is what the new file pins: no rebuild next time.
        want=$(fingerprint "$spec" "$constraints")
    fi
    echo "$want" >"$stamp"
    say "$venv ready in $((SECONDS - start)) s"
}

# Pin what the leg's virtualenv holds now: every distribution but the package
# itself (editable) and the seed tools uv adds for trying things by hand.
write_constraints() {
    local leg=$1 venv=$2 file=$3
    mkdir -p "$(dirname "$file")"
    {
        echo "# The exact versions the $leg leg installs (tools/bootstrap.sh)."
        echo "# Written by \`make constraints\` (tools/bootstrap.sh"
        echo "# --refresh-constraints $leg); do not edit by hand."
        "$UV" pip freeze --quiet --python "$venv/bin/python" --exclude-editable \
            --exclude pip --exclude setuptools --exclude wheel
    } >"$file.tmp"
    mv "$file.tmp" "$file"
    say "wrote $file"
}

# -- main -----------------------------------------------------------------------

servers=all
browser=no
refresh=no
legs=()
for arg in "$@"; do
    case "$arg" in
        --redis-only) servers=redis ;;
        --no-servers) servers=none ;;
        --browser) browser=yes ;;
        --refresh-constraints) refresh=yes ;;
        -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$SCRIPT"; exit 0 ;;
        -*) die "unknown option $arg" ;;
        *) leg_spec "$arg" >/dev/null; legs+=("$arg") ;;
    esac
done

if [[ $refresh == yes ]]; then
    # Resolving and installing needs no servers.
    servers=none
    if [[ ${#legs[@]} -eq 0 ]]; then read -r -a legs <<<"$KNOWN_LEGS"; fi
fi
install_servers "$servers"
install_browser "$browser"
tools_venv
for leg in "${legs[@]}"; do
    leg_venv "$leg" "$refresh"
done
