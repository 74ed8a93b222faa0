"""What keeps the Chaos tab to its own page and its own user (docs/security.md).

The tab kills processes and injects faults, and it lives in a browser UI, so any web
page the user has open could try to drive it (a plain HTML form needs no CORS
preflight), and anyone on the network could open it. Four defences, all in this module:

- `ChaosGuard.check(request)`, before every route of the tab (and, for the Origin part,
  before every state-changing request of Locust's web UI while the tab is loaded):
  * the request's `Host` is one of the loopback names when the web UI listens on
    loopback only (a DNS-rebinding page reaches 127.0.0.1 under a foreign name);
  * a state-changing request (anything but GET, HEAD, OPTIONS) whose `Origin` (or,
    without one, `Referer`) is not the web UI's own origin is refused;
  * a state-changing request of the tab also needs `Content-Type: application/json`
    (which a cross-site form cannot send without a preflight) and the header
    `X-Chaos-Token` carrying this process's token (`secrets.token_urlsafe`, made
    when the tab is built, written into the tab's own pages for their script).
  A refusal is `Refused` (the tab answers 403 problem+json); nothing has run by then.
- `bind_host(options)`: with the tab loaded and no `--web-host` given, the web UI
  listens on 127.0.0.1 only; `exposure_warning` is the warning printed when it is
  told to listen elsewhere.
- `install_basic_auth(web_ui, environ)`: Locust's `--web-login` with the harness's
  locustfiles, which configure no login of their own: HTTP basic auth against
  `HARNESS_WEB_USER` (default `harness`) and `HARNESS_WEB_PASSWORD` (required). The
  tab's routes sit behind Locust's `auth_required_if_enabled`, so they honour it.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlsplit

from flask import Request, Response

from harness.errors import HarnessError

TOKEN_HEADER: Final = "X-Chaos-Token"
SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
LOOPBACK_NAMES: Final = frozenset({"localhost", "127.0.0.1", "::1"})
DEFAULT_BIND: Final = "127.0.0.1"
USER_VAR: Final = "HARNESS_WEB_USER"
PASSWORD_VAR: Final = "HARNESS_WEB_PASSWORD"
DEFAULT_USER: Final = "harness"


class Refused(Exception):
    """A request the guard turns away (403): `title` and `detail` for problem+json."""

    def __init__(self, title: str, detail: str) -> None:
        super().__init__(detail)
        self.title, self.detail = title, detail


def is_loopback(host: str) -> bool:
    """True for a loopback name or address (127.0.0.0/8, ::1, localhost)."""
    name = host.strip("[]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def origin_of(url: str) -> str | None:
    """`scheme://host[:port]` of a URL (None for one without both, e.g. `null`)."""
    parts = urlsplit(url)
    if not parts.scheme or not parts.netloc:
        return None
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}"


@dataclass(frozen=True)
class ChaosGuard:
    """The checks of one web UI process; `token` lives as long as the process."""

    loopback_only: bool
    token: str = field(default_factory=lambda: secrets.token_urlsafe(32), repr=False)

    def check_host(self, request: Request) -> None:
        if self.loopback_only and not is_loopback(urlsplit(f"//{request.host}").hostname or ""):
            raise Refused("Host refused", f"the web UI listens on loopback only; {request.host!r} is not a "
                                          "loopback name (open it as 127.0.0.1 or localhost)")

    def check_origin(self, request: Request) -> None:
        """A state-changing request from another page's origin is refused."""
        if request.method in SAFE_METHODS:
            return
        own = f"{request.scheme}://{request.host}".lower()
        origin = request.headers.get("Origin")
        source, sent = ("Origin", origin) if origin is not None else ("Referer", request.headers.get("Referer"))
        if sent is not None and origin_of(sent) != own:
            raise Refused("Cross-site request refused",
                          f"{source} {sent!r} is not this web UI ({own}): the Chaos tab takes orders from its own "
                          "page only")

    def check(self, request: Request) -> None:
        """Every check a route of the tab needs (see the module docstring)."""
        self.check_host(request)
        self.check_origin(request)
        if request.method in SAFE_METHODS:
            return
        if request.mimetype != "application/json":
            raise Refused("JSON required", "a request that changes something must be Content-Type: "
                                           f"application/json, not {request.mimetype or 'none'!r}")
        sent = request.headers.get(TOKEN_HEADER, "")
        if not hmac.compare_digest(sent.encode(), self.token.encode()):
            raise Refused("Token required", f"the {TOKEN_HEADER} header is missing or wrong: the tab's own "
                                            "page sends it (reload the page after a restart of Locust)")


def bind_host(web_host: str) -> str | None:
    """The address the web UI must listen on instead of Locust's default, or None to
    leave it: no `--web-host` (Locust's empty default, every interface) means 127.0.0.1."""
    return DEFAULT_BIND if not web_host else None


def exposure_warning(web_host: str, port: int, web_login: bool) -> str | None:
    """The warning for a web UI told to listen beyond loopback (None on loopback)."""
    if is_loopback(web_host):
        return None
    where = "every interface" if web_host in ("", "*", "0.0.0.0", "::") else web_host
    protection = ("--web-login is on: only the user and password given in the environment get in"
                  if web_login else
                  "anyone who can reach it can kill the stack's processes and inject faults; "
                  f"add --web-login (with {PASSWORD_VAR} set) or use --web-host 127.0.0.1")
    return (f"WARNING: the Chaos tab is served on {where}, port {port}: {protection}. Its traffic is plain "
            "HTTP unless --tls-cert/--tls-key are given (docs/security.md)")


class _WebUser:
    """The one user of basic auth, as Flask-Login wants a user (its UserMixin, untyped)."""

    is_authenticated = True
    is_active = True
    is_anonymous = False

    def __init__(self, name: str) -> None:
        self.id = name

    def get_id(self) -> str:
        return self.id


def install_basic_auth(web_ui: Any, environ: Mapping[str, str]) -> bool:
    """With `--web-login` and no login configured by the locustfile: HTTP basic auth
    against HARNESS_WEB_USER / HARNESS_WEB_PASSWORD. Returns whether it was installed;
    raises HarnessError when the password is missing (Locust then exits)."""
    if not getattr(web_ui, "web_login", False):
        return False
    manager = web_ui.login_manager
    if getattr(manager, "_user_callback", None) is not None or getattr(manager, "_request_callback", None) is not None:
        return False  # the locustfile brought its own login
    password = environ.get(PASSWORD_VAR, "")
    if not password:
        raise HarnessError(f"--web-login with the harness's locustfiles needs a password: set {PASSWORD_VAR} "
                           f"(and {USER_VAR}, default {DEFAULT_USER}) in Locust's environment")
    user = environ.get(USER_VAR) or DEFAULT_USER
    app = web_ui.app
    if not app.secret_key:
        app.secret_key = secrets.token_hex(32)  # Locust's auth decorator writes to the session

    def from_request(request: Request) -> _WebUser | None:
        given = request.authorization
        if given is None or given.type != "basic":
            return None
        matches = hmac.compare_digest(str(given.username or "").encode(), user.encode())
        matches &= hmac.compare_digest(str(given.password or "").encode(), password.encode())
        return _WebUser(user) if matches else None

    def unauthorized() -> Response:
        return Response("login required\n", status=401, mimetype="text/plain",
                        headers={"WWW-Authenticate": 'Basic realm="Locust (harness)", charset="UTF-8"'})

    manager.request_loader(from_request)
    manager.unauthorized_handler(unauthorized)
    return True
