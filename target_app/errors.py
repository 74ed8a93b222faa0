"""The target app's exception root and RFC 9457 problem+json responses.

Every exception the app raises on purpose derives from TargetAppError. A Problem
carries everything its response needs (status, title, detail, type, extra members,
headers); routes/problems.py turns it into a Flask response, and
`problem_wsgi_response` answers with it from WSGI middleware outside Flask.
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse

PROBLEM_CONTENT_TYPE = "application/problem+json"


class TargetAppError(Exception):
    """Root of every exception the target app raises on purpose."""


class ConfigError(TargetAppError):
    """A setting from the environment is invalid; raised at startup."""


class StoreUnavailable(TargetAppError):
    """The idempotency store (or Redis behind the domain) could not be reached."""


class Problem(TargetAppError):
    """An error that becomes an RFC 9457 problem+json response at the boundary."""

    def __init__(self, status: int, title: str, detail: str, *, type_: str = "about:blank",
                 headers: dict[str, str] | None = None, **extra: object) -> None:
        super().__init__(f"{status} {title}: {detail}")
        self.status = status
        self.title = title
        self.detail = detail
        self.type = type_
        self.headers = dict(headers or {})
        self.extra = extra

    def body(self) -> bytes:
        document = {"type": self.type, "title": self.title, "status": self.status,
                    "detail": self.detail, **self.extra}
        return json.dumps(document, separators=(",", ":")).encode()


def problem_wsgi_response(problem: Problem, start_response: StartResponse) -> list[bytes]:
    """Answer a WSGI call with a problem (used by middleware outside Flask)."""
    body = problem.body()
    try:
        phrase = HTTPStatus(problem.status).phrase
    except ValueError:
        phrase = "Error"
    headers = [("Content-Type", PROBLEM_CONTENT_TYPE), ("Content-Length", str(len(body)))]
    headers += list(problem.headers.items())
    start_response(f"{problem.status} {phrase}", headers)
    return [body]
