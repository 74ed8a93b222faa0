#!/usr/bin/env bash
# Installs what the harness needs on a fresh Debian/Ubuntu machine, and nothing
# that is already there: redis-server, chromium (for the web UI test), postgresql,
# rabbitmq-server, nats-server (servers the probe's tests start on their own
# ports) and faketime (the clock fault's libfaketime) from the distribution's
# packages, and this project with its dev extra in ./.venv.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# Installs Debian package $1 when command $2 (a name on PATH or an absolute path) is
# missing. Debian's server packages start a system-wide service on install: stop it
# (service $3, when given), since the harness and its tests run their own instances.
install_missing() {
    local package=$1 command=$2 service=${3:-}
    if command -v "$command" >/dev/null 2>&1 || [ -x "$command" ]; then
        return 0
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "setup: $package is missing and apt-get is not available; install $package yourself" >&2
        exit 2
    fi
    echo "setup: installing $package from Debian's packages" >&2
    if [ -z "${APT_UPDATED:-}" ]; then
        as_root apt-get update -qq
        APT_UPDATED=1
    fi
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$package" >/dev/null
    if [ -n "$service" ]; then
        as_root service "$service" stop >/dev/null 2>&1 || true
    fi
}

install_missing redis-server redis-server redis-server
# The web UI test drives a real headless Chromium: Debian's, never a browser that
# Playwright would download.
install_missing chromium chromium
# The probe's tests run real servers of their own: PostgreSQL clusters (initdb),
# RabbitMQ nodes and NATS JetStream servers on free loopback ports.
install_missing postgresql /usr/lib/postgresql/15/bin/initdb postgresql
install_missing rabbitmq-server /usr/lib/rabbitmq/bin/rabbitmq-server rabbitmq-server
install_missing nats-server nats-server
# The clock fault (docs/clocks.md) starts a target under libfaketime's LD_PRELOAD
# library; Debian's faketime package brings it (libfaketime) and its command.
install_missing faketime faketime
# RabbitMQ's package also leaves Erlang's port mapper running; the tests start their own.
if [ -n "${APT_UPDATED:-}" ]; then
    as_root pkill -x epmd >/dev/null 2>&1 || true
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
# stripe-python's own test suite, from the sdist of the pinned SDK on PyPI (wheels carry
# no tests): tests/provider/test_stripe_python_suite.py runs it against `harness provider`
# as stripe's developers run it against stripe-mock. Kept inside the venv, fetched once.
stripe_version="$("$VENV/bin/python" -c 'import stripe; print(stripe.VERSION)')"
stripe_suite="$VENV/share/stripe-python-$stripe_version"
if [ ! -d "$stripe_suite/tests" ]; then
    echo "setup: fetching stripe-python $stripe_version's test suite" >&2
    rm -rf "$stripe_suite.part" && mkdir -p "$stripe_suite.part"
    "$VENV/bin/pip" download -q --no-deps --no-binary :all: -d "$stripe_suite.part" "stripe==$stripe_version"
    tar -xzf "$stripe_suite.part"/stripe-"$stripe_version".tar.gz -C "$stripe_suite.part" --strip-components=1
    rm -f "$stripe_suite.part"/stripe-"$stripe_version".tar.gz
    mv "$stripe_suite.part" "$stripe_suite"
fi
# The project's own bytecode, written now: a machine whose environment sets
# PYTHONDONTWRITEBYTECODE (the development machine's does; CI's most likely too)
# otherwise compiles the harness from source in every process it starts, and a smoke
# job or a test run starts hundreds (each app, consumer, janitor, CLI). Python still reads fresh bytecode with that set,
# and recompiles a file edited since. Quiet, and quick when nothing changed.
"$VENV/bin/python" -m compileall -q -j 0 harness target_app examples tests benchmarks >/dev/null
