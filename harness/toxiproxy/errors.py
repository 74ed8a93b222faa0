"""Errors of the embedded Toxiproxy server.

`ApiError` carries the HTTP status and message that Toxiproxy itself would send,
so the HTTP layer can turn any of them into `{"error": ..., "status": ...}`.
"""

from __future__ import annotations


class ToxiproxyError(Exception):
    """Root of every error raised by harness.toxiproxy."""


class ApiError(ToxiproxyError):
    """An error answered to an API client with a status code."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def bad_request_body(detail: str) -> ApiError:
    return ApiError(f"bad request body: {detail}", 400)


def missing_field(field: str) -> ApiError:
    return ApiError(f"missing required field: {field}", 400)


PROXY_NOT_FOUND = ("proxy not found", 404)
PROXY_EXISTS = ("proxy already exists", 409)
INVALID_STREAM = ("stream was invalid, can be either upstream or downstream", 400)
INVALID_TOXIC_TYPE = ("invalid toxic type", 400)
TOXIC_EXISTS = ("toxic already exists", 409)
TOXIC_NOT_FOUND = ("toxic not found", 404)


def api_error(kind: tuple[str, int]) -> ApiError:
    """A fresh ApiError for one of the fixed Toxiproxy errors above."""
    return ApiError(kind[0], kind[1])
