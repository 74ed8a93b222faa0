"""The error handlers: every error the app answers is RFC 9457 problem+json.

- a `Problem` is answered as it says;
- a Werkzeug HTTP error (404 no route, 405 with `Allow`, 413 over
  MAX_CONTENT_LENGTH, ...) becomes the problem `/problems/http-<status>`;
- a Redis error or StoreUnavailable is 503 `/problems/store-unavailable` with
  `Retry-After: 1` (a Redis outage is never a 500);
- an injected transient error (an armed crash point, CrashPointError) is 503
  `/problems/transient-error` with `Retry-After: 1`;
- anything else is logged and answered 500 `/problems/internal`, without details.
"""

from __future__ import annotations

import logging

import redis
from flask import Flask, Response
from werkzeug.exceptions import HTTPException, MethodNotAllowed

from target_app.crashpoints import CrashPointError
from target_app.errors import PROBLEM_CONTENT_TYPE, Problem, StoreUnavailable

log = logging.getLogger(__name__)


def problem_response(problem: Problem) -> Response:
    return Response(problem.body(), status=problem.status, content_type=PROBLEM_CONTENT_TYPE,
                    headers=problem.headers)


def _on_http_error(exc: HTTPException) -> Response:
    status = exc.code or 500
    allowed = exc.valid_methods if isinstance(exc, MethodNotAllowed) else None
    return problem_response(Problem(status, exc.name, exc.description or exc.name,
                                    type_=f"/problems/http-{status}",
                                    headers={"Allow": ", ".join(allowed)} if allowed else None))


def _on_store_unavailable(exc: Exception) -> Response:
    log.warning("Redis unavailable: %s", exc)
    return problem_response(Problem(503, "Service unavailable", "the data store cannot be reached",
                                    type_="/problems/store-unavailable", headers={"Retry-After": "1"}))


def _on_injected_error(exc: Exception) -> Response:
    return problem_response(Problem(503, "Service unavailable", str(exc),
                                    type_="/problems/transient-error", headers={"Retry-After": "1"}))


def _on_unexpected(exc: Exception) -> Response:
    log.exception("unexpected error")
    return problem_response(Problem(500, "Internal error", "an unexpected error occurred",
                                    type_="/problems/internal"))


def register_error_handlers(app: Flask) -> None:
    app.register_error_handler(Problem, problem_response)
    app.register_error_handler(HTTPException, _on_http_error)
    app.register_error_handler(redis.RedisError, _on_store_unavailable)
    app.register_error_handler(StoreUnavailable, _on_store_unavailable)
    app.register_error_handler(CrashPointError, _on_injected_error)
    app.register_error_handler(Exception, _on_unexpected)
