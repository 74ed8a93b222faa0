"""Fixtures shared by every test package.

One private redis-server per test session on a free loopback port; each test that
asks for `redis_url` gets its own logical database, flushed before use. Tests that
need an HTTP service of their own (the target app, an example) start it with
`http_services` (tests/support/services.py), which stops it after the test. Tests
that need a running embedded Toxiproxy ask for `embedded_toxiproxy`
(tests/support/toxiproxy.py); a real PostgreSQL, `postgres_server` / `postgres_db`
(tests/support/postgres.py).

The suite runs on several pytest-xdist workers (Makefile): every fixture here is per
worker (each its own redis-server, own ports, own tmp_path), and the tests of a module
that shares one costly session or module fixture run on one worker (ONE_WORKER_MODULES).
"""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
import redis

from harness.ports import free_port
from harness.stack.redis_server import INSTALL_HINT, RedisServer
from tests.support.services import READY_TIMEOUT, HttpService, http_service

# Fixtures that live in tests/support, offered to every test package.
pytest_plugins = ["tests.support.toxiproxy", "tests.support.postgres", "tests.support.rabbitmq",
                  "tests.support.nats"]


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    if shutil.which("redis-server") is None:
        pytest.fail(INSTALL_HINT, pytrace=False)
    server = RedisServer(data_dir=tmp_path_factory.mktemp("redis"), appendonly=False)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def _database_numbers() -> Iterator[int]:
    # Database 0 is left alone; 1..63 are handed out round-robin and flushed.
    return itertools.cycle(range(1, 64))


@pytest.fixture
def redis_url(redis_server: RedisServer, _database_numbers: Iterator[int]) -> str:
    number = next(_database_numbers)
    url = f"redis://{redis_server.host}:{redis_server.port}/{number}"
    client = redis.Redis.from_url(url)
    client.flushdb()
    client.close()
    return url


@pytest.fixture
def http_services(tmp_path: Path) -> Iterator[Callable[..., HttpService]]:
    """`http_services(name, argv_for_port, env=...)` → an HttpService on a free port,
    healthy; `argv_for_port(port)` gives its command line. Its log is
    `<tmp_path>/<name>.log`; every service started is stopped after the test."""
    started: list[HttpService] = []

    def start(name: str, argv_for_port: Callable[[int], list[str]], *,
              env: Mapping[str, str]) -> HttpService:
        port = free_port()
        service = http_service(name, argv_for_port(port), port=port, env=env, log_path=tmp_path / f"{name}.log")
        # Listed before it starts: one that never gets healthy is stopped all the same.
        started.append(service)
        service.start()
        service.wait_healthy(READY_TIMEOUT)
        return service

    yield start
    for service in started:
        service.stop()


# Modules whose tests share a session or module fixture too costly to build once per
# xdist worker. tests/e2e/test_smoke.py reads one whole `harness smoke` job (smoke_run,
# minutes of CPU on two cores). The others share a module-scoped stack, web UI, wheel or
# script: with each test scheduled on its own, every worker that ran one of them built
# that fixture again (2-4 builds of a few seconds of CPU each, measured from process
# accounting; tests/webui/test_check_stack.py is left out: its four tests are long and
# one build is cheap beside them). Under `--dist loadgroup` (the Makefile's setting)
# each listed module is one unit of work; every other test is scheduled on its own, as
# with `--dist load`. A module missing here still passes; it only builds its fixture
# on more workers.
ONE_WORKER_MODULES = (
    "tests/e2e/test_smoke.py",
    "tests/e2e/test_install.py",          # wheel: a `pip wheel` of the checkout
    "tests/webui/test_chaos_api.py",      # web: a stack and a Locust web UI
    "tests/webui/test_security.py",       # web: a stack and a Locust web UI
    "tests/load/test_scenarios.py",       # stack
    "tests/load/test_by_hand.py",         # workdir: `harness up` / `down`
    "tests/distributed/test_workers.py",  # stack_dir: `harness up` / `down`
    "tests/nemesis/test_crash_points_stack.py",  # stack
    "tests/nemesis/test_clock_stack.py",  # stack (on fake clocks)
    "tests/stack/test_faults.py",         # shared_stack
    "tests/cli/test_completion.py",       # script: `harness completion bash`
)

# Whole-run packages: every test in them starts stacks, swarms and runs the checker
# end to end (minutes in all), so the fast inner loop `-m "not slow"` leaves them out.
SLOW_PACKAGES = ("e2e", "lifecycle", "webui")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tests_root = Path(__file__).parent
    for item in items:
        path = Path(item.fspath)
        if path.is_relative_to(tests_root) and path.relative_to(tests_root).parts[0] in SLOW_PACKAGES:
            item.add_marker(pytest.mark.slow)


# Why a scheduler of our own: pytest-xdist's loadgroup tags each test's node id with its
# xdist_group in the worker (item._nodeid), which pytest 9 no longer reads, so the marks
# group nothing; the scheduling half of loadgroup is public (LoadScopeScheduling and this
# hook) and needs only to be told each test's unit of work.
@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    if config.getoption("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module in ONE_WORKER_MODULES else nodeid

    return ModuleGroups(config, log)
