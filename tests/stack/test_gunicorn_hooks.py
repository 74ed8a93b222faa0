"""The stack's gunicorn settings file (harness.stack.gunicorn_hooks): its workers find
the app's modules imported by their master, and still build their own app."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import requests

from harness.stack import services as svc
from harness.stack.gunicorn_hooks import WORKER_MODULES
from tests.support.services import ROOT, HttpService

HOOKS = ROOT / "harness" / "stack" / "gunicorn_hooks.py"

# A WSGI module that tells what its worker found on import: which of the app's
# modules were in sys.modules already, and its own pid (one app per worker).
PROBE_APP = '''
import os, sys, json
FOUND = sorted(name for name in {modules!r} if name in sys.modules)
BUILT_IN = os.getpid()

def app(environ, start_response):
    start_response("200 OK", [("Content-Type", "application/json")])
    return [json.dumps({{"found": FOUND, "built_in": BUILT_IN, "pid": os.getpid()}}).encode()]
'''


def _serve(http_services: Callable[..., HttpService], tmp_path: Path, *hooks: str) -> HttpService:
    (tmp_path / "probe_wsgi.py").write_text(PROBE_APP.format(modules=WORKER_MODULES))
    env = {"PYTHONPATH": f"{tmp_path}:{ROOT}"}
    return http_services("gunicorn", lambda port: svc.python_module(
        "gunicorn", "--bind", f"{svc.HOST}:{port}", "--workers", "2", "--chdir", str(tmp_path),
        "--log-level", "warning", *hooks, "probe_wsgi:app"), env=env)


def _answers(service: HttpService) -> list[dict[str, object]]:
    # new connections, so both workers answer some of them
    return [requests.get(f"{service.url}/healthz", timeout=5).json() for _ in range(20)]


def test_workers_find_the_app_modules_imported_by_their_master(
        http_services: Callable[..., HttpService], tmp_path: Path) -> None:
    answers = _answers(_serve(http_services, tmp_path, "--config", str(HOOKS)))
    assert all(answer["found"] == sorted(WORKER_MODULES) for answer in answers), answers[0]
    # each worker built its own app after the fork, not the master before it
    assert all(answer["built_in"] == answer["pid"] for answer in answers), answers


def test_without_the_hooks_each_worker_imports_them_itself(
        http_services: Callable[..., HttpService], tmp_path: Path) -> None:
    answers = _answers(_serve(http_services, tmp_path))
    assert all(answer["found"] == [] for answer in answers), answers[0]
