#!/usr/bin/env bash
# Installs what the harness needs on a fresh Debian/Ubuntu machine, and nothing
# that is already there: redis-server and chromium (for the web UI test) from the
# distribution's packages, and this project with its dev extra in ./.venv.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

if ! command -v redis-server >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1; then
        echo "setup: installing redis-server from Debian's packages" >&2
        as_root apt-get update -qq
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
        # Debian's package starts a system-wide instance; the harness runs its own.
        as_root service redis-server stop >/dev/null 2>&1 || true
    else
        echo "setup: redis-server is missing and apt-get is not available; install Redis 7 yourself" >&2
        exit 2
    fi
fi

# The web UI test drives a real headless Chromium: Debian's, never a browser that
# Playwright would download.
if ! command -v chromium >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1; then
        echo "setup: installing chromium from Debian's packages" >&2
        as_root apt-get update -qq
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    else
        echo "setup: chromium is missing and apt-get is not available; install Chromium yourself" >&2
        exit 2
    fi
fi

if [ ! -x "$VENV/bin/python" ]; then
    echo "setup: creating $VENV" >&2
    "$PYTHON" -m venv "$VENV"
fi
stamp="$VENV/.installed-$(sha256sum pyproject.toml | cut -c1-16)"
if [ ! -f "$stamp" ]; then
    echo "setup: installing the project into $VENV" >&2
    "$VENV/bin/pip" install -q --upgrade pip
    "$VENV/bin/pip" install -q -e '.[dev]'
    rm -f "$VENV"/.installed-*
    touch "$stamp"
fi
