"""Crash points: a typed, verifying client of the app's internal crash-point endpoints.

The target app names a crash point at every step boundary of its layers (the list:
docs/target-app.md, `harness.catalog.CRASH_POINTS`). Each is off until armed with an
action (`crash`: the process ends at once; `error`: a transient failure raised
there; `delay`: `delay_ms` of sleep; `drop-reply`: the work is done and the answer
never leaves), a probability and an optional count. The app arms and disarms them
on its internal listener only (`StackInfo.app_direct_url`, `Authorization: Bearer
<internal token>`), never on the public, proxied port:

    GET    /internal/v1/crash-points          {"points": [ENTRY, ...]}
    PUT    /internal/v1/crash-points/NAME     {"action", "probability", "count", "delay_ms"} -> ENTRY
    DELETE /internal/v1/crash-points/NAME     -> ENTRY (disarmed)
    DELETE /internal/v1/crash-points          every point disarmed
    GET    /internal/v1/crash-points/hits     {"hits": [{"name", "action", "process", "pid", "at"}]}

`CrashPointClient` is the one caller of those endpoints. Like the Toxiproxy client
(harness.nemesis.toxiproxy_client) it verifies every change by reading the app back:
`arm` returns only once the app's read-back (the PUT's answer: the point as read
back from the state every process shares) shows the point armed as asked (otherwise
it disarms it again and raises `NemesisVerifyError`), `disarm` and `disarm_all` only
once a read-back shows it off (otherwise `NemesisHealError` says which points may
still be armed). Errors are the nemesis's own (`NemesisError` and its subclasses), so a
caller handles a crash point like any other fault.

`Arming` is what a point is armed with, checked before anything is sent
(`check_arming`: one-line messages, fit for a CLI or a plan error); `CrashPointInfo`
one point as the app describes it, `CrashPointHit` one time an armed action fired.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import requests

from harness.nemesis.toxiproxy_client import (
    HealFailure,
    NemesisError,
    NemesisHealError,
    NemesisInvalid,
    NemesisNotFound,
    NemesisUnreachable,
    NemesisVerifyError,
)

# What an armed point can do, in the order users see them.
CRASH_POINT_ACTIONS = ("crash", "error", "delay", "drop-reply")
PATH = "/internal/v1/crash-points"
# A crashing app worker cuts the calls it was serving, the internal listener's too
# (gthread: one process serves many requests), and while crash points fire several
# workers may die in a row; each call is idempotent (a read, or setting a point to one
# state), so a call that got no answer is tried again for up to RETRY_SECONDS. A
# refused connection is another matter: gunicorn's master holds the listening socket
# while its workers die and come back, so "refused" means the whole app is gone (a
# stack stopped under the run, or the app's process killed): tried again only for
# REFUSED_RETRY_SECONDS (a supervisor's restart), so a run on a stopped stack is not
# held up by its heal.
RETRY_SECONDS = 15.0
REFUSED_RETRY_SECONDS = 2.0
RETRY_PAUSE = 0.3


@dataclass(frozen=True)
class Arming:
    """What a crash point is armed with: the action, the chance it fires each time the
    point is passed, how many times at most (None: until disarmed), and the sleep of a
    `delay`."""

    action: str
    probability: float = 1.0
    count: int | None = None
    delay_ms: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"action": self.action, "probability": self.probability, "count": self.count,
                "delay_ms": self.delay_ms}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Arming:
        count = raw.get("count")
        return cls(action=str(raw["action"]), probability=float(raw.get("probability", 1.0)),
                   count=None if count is None else int(count), delay_ms=int(raw.get("delay_ms") or 0))

    def describe(self) -> str:
        """`crash probability=0.3 count=5`, `delay 200ms probability=1`."""
        delay = f" {self.delay_ms}ms" if self.action == "delay" else ""
        count = f" count={self.count}" if self.count is not None else ""
        return f"{self.action}{delay} probability={self.probability:g}{count}"


def check_arming(action: Any, probability: Any = 1.0, count: Any = None, delay_ms: Any = None) -> Arming:
    """An `Arming` from raw values, or `NemesisInvalid` with a one-line reason."""
    if action not in CRASH_POINT_ACTIONS:
        raise NemesisInvalid(f"action must be one of {', '.join(CRASH_POINT_ACTIONS)}, not {action!r}")
    if (isinstance(probability, bool) or not isinstance(probability, (int, float))
            or not math.isfinite(probability) or not 0.0 < probability <= 1.0):
        raise NemesisInvalid(f"probability must be a number in (0, 1], not {probability!r}")
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
        raise NemesisInvalid(f"count must be an integer >= 1, not {count!r}")
    if delay_ms is None:
        delay_ms = 0
    if isinstance(delay_ms, bool) or not isinstance(delay_ms, int) or delay_ms < 0:
        raise NemesisInvalid(f"delay_ms must be an integer >= 0, not {delay_ms!r}")
    if action == "delay" and delay_ms == 0:
        raise NemesisInvalid("a delay needs delay_ms > 0 (milliseconds)")
    if action != "delay" and delay_ms:
        raise NemesisInvalid(f"delay_ms goes with the delay action only, not with {action}")
    return Arming(action=str(action), probability=float(probability), count=count, delay_ms=delay_ms)


@dataclass(frozen=True)
class CrashPointInfo:
    """One crash point as the app describes it; `hits` counts every time an armed
    action fired there since the stack started (all processes)."""

    name: str
    layer: str
    process: str
    description: str
    actions: tuple[str, ...]
    armed: Arming | None
    hits: int

    @classmethod
    def from_json(cls, raw: Any) -> CrashPointInfo:
        if not isinstance(raw, dict):
            raise ValueError(f"a crash point is an object, not {raw!r}")
        armed = raw.get("armed")
        return cls(name=str(raw["name"]), layer=str(raw.get("layer", "")), process=str(raw.get("process", "")),
                   description=str(raw.get("description", "")),
                   actions=tuple(str(action) for action in raw.get("actions") or ()),
                   armed=None if armed is None else Arming.from_json(armed), hits=int(raw.get("hits") or 0))


@dataclass(frozen=True)
class CrashPointHit:
    """One time an armed action fired: where, what, in which process, when (unix s)."""

    name: str
    action: str
    process: str
    pid: int | None
    at: float

    @classmethod
    def from_json(cls, raw: Any) -> CrashPointHit:
        if not isinstance(raw, dict):
            raise ValueError(f"a hit is an object, not {raw!r}")
        pid = raw.get("pid")
        return cls(name=str(raw["name"]), action=str(raw.get("action", "")), process=str(raw.get("process", "")),
                   pid=None if pid is None else int(pid), at=float(raw["at"]))


def armed_as_asked(found: Arming | None, asked: Arming, *, fired: int) -> bool:
    """Does a read-back show `asked`? A point armed with a count may have used it up
    (and disarmed itself, or count down) between the arming and the read: that is
    armed as asked too, when it fired that often."""
    if found is None:
        return asked.count is not None and fired >= asked.count
    if (found.action, found.delay_ms) != (asked.action, asked.delay_ms):
        return False
    if not math.isclose(found.probability, asked.probability, rel_tol=1e-9, abs_tol=1e-12):
        return False
    if asked.count is None:
        return found.count is None
    return found.count is not None and asked.count - fired <= found.count <= asked.count


class CrashPointClient:
    """Arm, disarm and read one app's crash points (module docstring)."""

    def __init__(self, app_url: str, token: str | None, *, timeout: float = 5.0,
                 retry_seconds: float = RETRY_SECONDS) -> None:
        self.app_url = app_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._timeout = timeout
        self._retry_seconds = retry_seconds

    # -- plumbing --------------------------------------------------------------
    def _request(self, method: str, path: str, what: str, body: Any = None) -> Any:
        url = self.app_url + path
        started = time.monotonic()
        deadline = started + self._retry_seconds
        attempts = 0
        while True:
            attempts += 1
            try:
                response = requests.request(method, url, json=body, headers=self._headers, timeout=self._timeout)
                break
            except requests.RequestException as error:
                if _refused(error):
                    deadline = min(deadline, started + REFUSED_RETRY_SECONDS)
                if time.monotonic() + RETRY_PAUSE >= deadline:
                    raise NemesisUnreachable(f"{what}: the app's internal listener at {self.app_url} "
                                             f"did not answer ({attempts} attempts): {error}") from None
                time.sleep(RETRY_PAUSE)
        if response.status_code >= 400:
            detail = _problem_detail(response)
            if response.status_code == 404:
                raise NemesisNotFound(f"{what}: {detail}")
            if response.status_code in (400, 422):
                raise NemesisInvalid(f"{what}: {detail}")
            if response.status_code == 401:
                raise NemesisError(f"{what}: the app refused the internal token ({detail})")
            raise NemesisError(f"{what}: the app answered {response.status_code}: {detail}")
        try:
            return response.json() if response.content else None
        except ValueError as error:
            raise NemesisError(f"{what}: the app's answer is not JSON: {error}") from None

    @staticmethod
    def _path(name: str) -> str:
        return f"{PATH}/{quote(name, safe='')}"

    @staticmethod
    def _entry(data: Any, what: str) -> CrashPointInfo:
        try:
            return CrashPointInfo.from_json(data)
        except (TypeError, KeyError, ValueError) as error:
            raise NemesisError(f"{what}: unexpected answer from the app: {error}") from None

    # -- reads -----------------------------------------------------------------
    def points(self) -> dict[str, CrashPointInfo]:
        """Every crash point the app has, by name."""
        data = self._request("GET", PATH, "list the crash points")
        try:
            points = [CrashPointInfo.from_json(raw) for raw in data["points"]]
        except (TypeError, KeyError, ValueError) as error:
            raise NemesisError(f"list the crash points: unexpected answer from the app: {error}") from None
        return {point.name: point for point in points}

    def point(self, name: str) -> CrashPointInfo:
        """One crash point; `NemesisNotFound` naming the known ones for a name the app lacks."""
        points = self.points()
        if name not in points:
            raise NemesisNotFound(f"unknown crash point {name!r} (crash points: {', '.join(sorted(points)) or 'none'})")
        return points[name]

    def armed(self) -> list[CrashPointInfo]:
        """The points armed now, by name."""
        return [point for _, point in sorted(self.points().items()) if point.armed is not None]

    def hits(self) -> list[CrashPointHit]:
        """Every time an armed action fired (the app's log of them), oldest first."""
        data = self._request("GET", f"{PATH}/hits", "read the crash-point hits")
        try:
            hits = [CrashPointHit.from_json(raw) for raw in data["hits"]]
        except (TypeError, KeyError, ValueError) as error:
            raise NemesisError(f"read the crash-point hits: unexpected answer from the app: {error}") from None
        return sorted(hits, key=lambda hit: hit.at)

    # -- changes, each read back -------------------------------------------------
    def arm(self, name: str, arming: Arming) -> CrashPointInfo:
        """Arm `name`; returns the read-back once it shows the point armed as asked.

        The read-back is the PUT's answer: the app answers with the point as it reads
        it back from the state every process shares, so one call arms and verifies
        (under load each call to the app waits its turn behind the load's requests,
        and a schedule of many windows must not fall behind)."""
        what = f"arm crash point {name}"
        try:
            after = self._entry(self._request("PUT", self._path(name), what, arming.to_json()), what)
        except NemesisNotFound:
            raise NemesisNotFound(f"{what}: unknown crash point {name!r} "
                                  f"(crash points: {', '.join(sorted(self.points())) or 'none'})") from None
        if after.name != name or not armed_as_asked(after.armed, arming, fired=0):
            shown = after.armed.describe() if after.armed is not None else "not armed"
            try:
                self.disarm(name)
            except NemesisError as error:
                raise NemesisHealError([HealFailure(f"crash point {name}", str(error))],
                                       f"{what}: read back {shown}, not {arming.describe()}") from None
            raise NemesisVerifyError(f"{what}: the app accepted it but reads back {shown}, "
                                     f"not {arming.describe()} (disarmed again)")
        return after

    def disarm(self, name: str) -> CrashPointInfo:
        """Disarm `name`; returns the read-back (the DELETE's answer, as for `arm`) once
        it shows the point off."""
        what = f"disarm crash point {name}"
        after = self._entry(self._request("DELETE", self._path(name), what), what)
        if after.name != name or after.armed is not None:
            shown = after.armed.describe() if after.armed is not None else f"point {after.name}"
            raise NemesisVerifyError(f"{what}: the app acknowledged it but still reads back {shown}")
        return after

    def disarm_all(self) -> list[str]:
        """Every point disarmed (the names that were armed); `NemesisHealError` lists any
        still armed afterwards. An app without crash points (404) has nothing armed."""
        try:
            armed = [point.name for point in self.armed()]
        except NemesisNotFound:
            return []
        if not armed:
            return []  # nothing to do (and an app whose points are off refuses the call)
        self._request("DELETE", PATH, "disarm every crash point")
        left = self.armed()
        if left:
            raise NemesisHealError([HealFailure(f"crash point {point.name}", f"still armed: {point.armed.describe()}")
                                    for point in left if point.armed is not None], "disarm every crash point")
        return armed


def hits_between(hits: Sequence[CrashPointHit], name: str, start: float, end: float) -> list[CrashPointHit]:
    """The hits of point `name` from `start` to `end` (unix seconds, inclusive)."""
    return [hit for hit in hits if hit.name == name and start <= hit.at <= end]


def _problem_detail(response: requests.Response) -> str:
    """The app's problem+json `detail` (or `title`), else the body's text."""
    try:
        problem = response.json()
    except ValueError:
        problem = None
    if isinstance(problem, dict):
        text = problem.get("detail") or problem.get("title")
        if text:
            return str(text)
    return response.text.strip()[:200] or f"HTTP {response.status_code}"


def _refused(error: BaseException) -> bool:
    """Whether a failed request was a refused connection (nothing listens at all), found
    anywhere in the chain requests and urllib3 wrap it in."""
    seen: set[int] = set()
    pending: list[object] = [error]
    while pending:
        item = pending.pop()
        if not isinstance(item, BaseException) or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, ConnectionRefusedError):
            return True
        pending.extend([item.__cause__, item.__context__, getattr(item, "reason", None), *item.args])
    return False
