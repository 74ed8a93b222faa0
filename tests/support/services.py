"""HTTP services the tests start themselves, launched as the stack launches its own.

`HttpService` is a `harness.stack.services.Service` (own process group, parent-death
signal, SIGTERM then SIGKILL of the whole group on stop, the log's tail in the error
when it never gets healthy) that answers HTTP on 127.0.0.1:`port` and counts as
healthy once GET /healthz answers 200. The `http_services` fixture (tests/conftest.py)
starts them and stops every one after the test.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from harness.stack import services as svc

ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT = 20.0


class HttpService(svc.Service):
    """A service with an HTTP port of its own; `address` is host:port, `url` its base URL."""

    @property
    def port(self) -> int:
        assert self.spec.port is not None
        return self.spec.port

    @property
    def address(self) -> str:
        return f"{svc.HOST}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"


def http_service(name: str, argv: list[str], *, port: int, env: Mapping[str, str],
                 log_path: Path) -> HttpService:
    """An HttpService (not started) for `argv`, which must listen on `port`."""
    url = f"http://{svc.HOST}:{port}/healthz"
    return HttpService(svc.ServiceSpec(name=name, argv=argv, env=dict(env), log_path=log_path, port=port,
                                       check=lambda: svc.http_healthy(url)))


def target_app_gunicorn(port: int, *, workers: int, options: tuple[str, ...] = ()) -> list[str]:
    """argv of the target app under gunicorn with `workers` workers on 127.0.0.1:`port`."""
    return svc.python_module("gunicorn", "--workers", str(workers), "--bind", f"{svc.HOST}:{port}",
                             *options, "--log-level", "warning", "target_app.wsgi:app")
