"""The registry: every stack and every set of faults this checkout started, on disk.

One directory (`$HARNESS_REGISTRY`, else `.harness/registry` in the checkout that
holds the `harness` package) with two kinds of small JSON files:

- `stacks/<digest of root>.json`: one per stack, written by `start_stack` before the
  supervisor starts and removed when the stack stops. `harness status --all` and
  `harness down --all` read it; nothing scans processes by name.
- `leases/<id>.json`: what one process changed on a Toxiproxy (or started) that must
  not outlive it: proxies it created, toxics it added, proxies it disabled, process
  groups it owns, and the run directory to mark if it dies. The owner is a pid plus
  its start time (a reused pid is never mistaken for the owner). A lease whose owner
  is gone is a leftover: `reclaim` (called by every up, run and down on that
  Toxiproxy, and by the lifeline janitor at once) heals it and removes it. What a
  Toxiproxy refuses to undo (an answer other than success or 404) is one of
  reclaim's lines and the lease stays for the next try.

Writes are atomic (temp file + rename), so a reader never sees half a record, and
private: folders 0700, files 0600 (harness.stack.private_files).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import requests

from harness.names import DEFAULT_STACK_ROOT, EXPORT_FILE, INTERRUPTED_FILE, RESULT_FILE, SETTINGS_FILE
from harness.process_handle import group_alive, group_members, pid_alive, proc_stat_fields
from harness.stack import control
from harness.stack.info import StackError, read_info
from harness.stack.private_files import private_dir, write_private

REGISTRY_ENV = "HARNESS_REGISTRY"
HTTP_TIMEOUT = 2.0


def registry_dir() -> Path:
    """Where the registry lives (read on every call: tests point it elsewhere).

    `$HARNESS_REGISTRY`, else `.harness/registry` in the checkout the harness runs from,
    else (an installed harness: site-packages is no place to write) the user's state
    directory, `$XDG_STATE_HOME/idempotency-harness/registry`.
    """
    configured = os.environ.get(REGISTRY_ENV)
    if configured:
        return Path(configured).resolve()
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file() and (checkout / "harness").is_dir():
        return checkout / DEFAULT_STACK_ROOT / "registry"
    state_home = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    return state_home / "idempotency-harness" / "registry"


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    # Owner-only (0700 folders, 0600 files): a lease names the processes and faults a harness owns.
    private_dir(registry_dir())
    private_dir(path.parent)
    write_private(path, json.dumps(data, indent=2) + "\n")


def _read_json(path: Path) -> dict[str, Any] | None:
    """The object in path, or None when there is none to act on: the registry writes
    atomically (`_write_json`), so an unreadable file was never one of its records."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):  # RecursionError: nested too deep for the decoder
        return None
    return data if isinstance(data, dict) else None


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass  # gone already: what unlinking wanted


# --- process identity -----------------------------------------------------------------

def process_start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22)."""
    fields = proc_stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


@dataclass(frozen=True)
class Owner:
    """A process as a (pid, start time) pair, so a recycled pid is someone else."""

    pid: int
    start: int | None

    @classmethod
    def current(cls) -> Owner:
        return cls.of(os.getpid())

    @classmethod
    def of(cls, pid: int) -> Owner:
        return cls(pid, process_start_time(pid))

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Owner:
        data = data or {}
        return cls(int(data.get("pid") or 0), data.get("start"))

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "start": self.start}

    def alive(self) -> bool:
        return self.pid > 0 and self.start is not None and process_start_time(self.pid) == self.start


# --- stacks ---------------------------------------------------------------------------

def _stack_path(root: Path) -> Path:
    return registry_dir() / "stacks" / f"{digest(str(Path(root).resolve()))}.json"


def register_stack(root: Path, *, owner: str, mode: str, run_dir: Path | None = None) -> None:
    """Record a stack (owner: `up`, `run` or `foreground`) before it starts."""
    _write_json(_stack_path(root), {
        "root": str(Path(root).resolve()), "owner": owner, "mode": mode,
        "owner_process": Owner.current().to_json(), "created_at": time.time(),
        "run_dir": str(run_dir) if run_dir else None,
    })


def unregister_stack(root: Path) -> None:
    _unlink(_stack_path(root))


def registered_stacks() -> list[dict[str, Any]]:
    """Every stack entry, oldest first."""
    folder = registry_dir() / "stacks"
    entries = [entry for path in sorted(folder.glob("*.json")) if (entry := _read_json(path))]
    return sorted(entries, key=lambda entry: float(entry.get("created_at") or 0))


# --- leases ---------------------------------------------------------------------------

def normalize_url(url: str | None) -> str:
    if not url:
        return ""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    host = "127.0.0.1" if parts.hostname in ("localhost", None) else parts.hostname
    return f"http://{host}:{parts.port}"


def lease_path(lease_id: str) -> Path:
    return registry_dir() / "leases" / f"{lease_id}.json"


@dataclass(frozen=True)
class ProxyClaim:
    """A proxy a stack created on a Toxiproxy it may share with others."""

    name: str
    listen: str
    upstream: str  # a leftover is deleted only while it still points here


@dataclass(frozen=True)
class ToxicClaim:
    proxy: str
    name: str


@dataclass(frozen=True)
class OwnedProcess:
    """A process group (led by `owner.pid`) stopped with `signal` when its lease is healed."""

    owner: Owner
    name: str
    signal: str = "SIGTERM"


@dataclass(frozen=True)
class FaultedService:
    """A service of a stack that outlives the run (`harness up`), killed or paused by it."""

    root: str
    service: str


@dataclass
class Lease:
    """`leases/<id>.json`: what one process changed or started that must not outlive it.

    Written by the supervisor (kind `stack`: its proxies on a shared Toxiproxy) and by a
    run's guard (kind `run`: toxics, disabled proxies, process groups, faulted services
    of a kept stack); read by `reclaim`, the lifeline janitor and `harness down`.
    """

    id: str
    kind: str  # stack | run
    owner: Owner
    created_at: float
    toxiproxy_url: str = ""  # normalized (`normalize_url`); empty until one is used
    # A Toxiproxy the stack started dies with it: unreachable then means healed.
    toxiproxy_local: bool = False
    run_dir: str | None = None  # marked interrupted if the owner dies
    root: str | None = None  # a stack lease: the stack's root
    proxies: list[ProxyClaim] = field(default_factory=list)
    toxics: list[ToxicClaim] = field(default_factory=list)
    disabled: list[str] = field(default_factory=list)
    processes: list[OwnedProcess] = field(default_factory=list)
    services: list[FaultedService] = field(default_factory=list)

    def holds_faults(self) -> bool:
        return bool(self.toxics or self.disabled or self.services)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "kind": self.kind, "owner": self.owner.to_json(), "created_at": self.created_at,
            "toxiproxy_url": self.toxiproxy_url, "toxiproxy_local": self.toxiproxy_local,
            "run_dir": self.run_dir, "root": self.root,
            "proxies": [{"name": p.name, "listen": p.listen, "upstream": p.upstream} for p in self.proxies],
            "toxics": [{"proxy": t.proxy, "name": t.name} for t in self.toxics],
            "disabled": list(self.disabled),
            "processes": [{**p.owner.to_json(), "name": p.name, "signal": p.signal} for p in self.processes],
            "services": [{"root": e.root, "service": e.service} for e in self.services],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Lease:
        """The record in a lease file; KeyError, TypeError or ValueError when it is not one."""
        return cls(
            id=str(data["id"]), kind=str(data["kind"]), owner=Owner.from_json(data.get("owner")),
            created_at=float(data.get("created_at") or 0.0),
            toxiproxy_url=str(data.get("toxiproxy_url") or ""), toxiproxy_local=bool(data.get("toxiproxy_local")),
            run_dir=data.get("run_dir"), root=data.get("root"),
            proxies=[ProxyClaim(str(p["name"]), str(p.get("listen", "")), str(p.get("upstream", "")))
                     for p in data.get("proxies") or []],
            toxics=[ToxicClaim(str(t["proxy"]), str(t["name"])) for t in data.get("toxics") or []],
            disabled=[str(name) for name in data.get("disabled") or []],
            processes=[OwnedProcess(Owner.from_json(p), str(p.get("name", p["pid"])), str(p.get("signal", "SIGTERM")))
                       for p in data.get("processes") or []],
            services=[FaultedService(str(e["root"]), str(e["service"])) for e in data.get("services") or []],
        )


def new_lease(kind: str, *, toxiproxy_url: str | None = None, toxiproxy_local: bool = False,
              run_dir: Path | None = None, owner: Owner | None = None) -> Lease:
    owner = owner or Owner.current()
    return Lease(
        id=f"{kind}-{owner.pid}-{owner.start}-{digest(str(time.time_ns()))[:6]}",
        kind=kind, owner=owner, created_at=time.time(), toxiproxy_url=normalize_url(toxiproxy_url),
        toxiproxy_local=toxiproxy_local, run_dir=str(Path(run_dir).resolve()) if run_dir else None,
    )


def write_lease(lease: Lease) -> None:
    _write_json(lease_path(lease.id), lease.to_json())


def remove_lease(lease_id: str) -> None:
    _unlink(lease_path(lease_id))


def read_lease(path: Path) -> Lease | None:
    """The lease in path, or None when there is none to act on (as `_read_json`)."""
    data = _read_json(path)
    if data is None:
        return None
    try:
        return Lease.from_json(data)
    except (KeyError, TypeError, ValueError):
        return None  # not a record the registry wrote


def leases() -> Iterator[tuple[Path, Lease]]:
    for path in sorted((registry_dir() / "leases").glob("*.json")):
        lease = read_lease(path)
        if lease is not None:
            yield path, lease


def reclaim(toxiproxy_url: str | None = None) -> list[str]:
    """Heal every lease whose owner is gone (only those on toxiproxy_url when given).

    Returns one line per thing undone, for a log or a status line. A lease whose
    external Toxiproxy cannot be reached is kept for the next try.
    """
    wanted = normalize_url(toxiproxy_url) if toxiproxy_url else None
    done: list[str] = []
    for path, lease in leases():
        if lease.owner.alive():
            continue
        if wanted is not None and lease.toxiproxy_url not in (wanted, ""):
            continue
        lines, healed = heal_lease(lease, live_claims(exclude=lease.id))
        done.extend(lines)
        if healed:
            _unlink(path)
    return done


def live_claims(exclude: str) -> set[tuple[str, str]]:
    """(toxiproxy url, proxy name) pairs that live owners created: never deleted for a dead one."""
    claims: set[tuple[str, str]] = set()
    for _, lease in leases():
        if lease.id != exclude and lease.owner.alive():
            claims.update((lease.toxiproxy_url, proxy.name) for proxy in lease.proxies)
    return claims


def heal_lease(lease: Lease, live_claims: set[tuple[str, str]] | None = None,
               *, grace: float = 3.0) -> tuple[list[str], bool]:
    """Undo one dead owner's lease: stop its processes, heal its faults, mark its run.

    Returns (what was done, whether everything is settled so the lease can go).
    """
    done: list[str] = []
    stopped = stop_processes(lease.processes, grace=grace)
    done.extend(f"stopped {name}" for name in stopped)
    url = lease.toxiproxy_url
    settled = True
    if url and (lease.toxics or lease.disabled or lease.proxies):
        try:
            healed, failed = _heal_toxiproxy(url, lease, live_claims or set())
            done.extend(healed)
            if failed:
                settled = False  # the lease keeps them; the next reclaim tries again
                done.extend(f"{line}; kept for later" for line in failed)
        except requests.RequestException as error:
            if not lease.toxiproxy_local:
                settled = False
                done.append(f"toxiproxy {url} unreachable, leftovers kept for later: {error}")
    for entry in lease.services:
        done.append(_start_service(Path(entry.root), entry.service))
    run_dir = lease.run_dir
    if run_dir and mark_interrupted(Path(run_dir), signal_name=None, by="lifeline"):
        done.append(f"marked {run_dir} interrupted")
    return done, settled


def refusal(response: requests.Response) -> str | None:
    """Why Toxiproxy refused an undo (`HTTP 500 ...`), or None when it is undone: a
    success, or a 404 for something already gone."""
    if response.status_code < 300 or response.status_code == 404:
        return None
    return f"HTTP {response.status_code} {response.text.strip()[:200]}"


def _heal_toxiproxy(url: str, lease: Lease,
                    live_claims: set[tuple[str, str]]) -> tuple[list[str], list[str]]:
    """(what was undone, what could not be): a 404 is something already gone, any
    other refusal is a failure the lease must keep."""
    done: list[str] = []
    failed: list[str] = []

    def settle(response: requests.Response, what: str) -> None:
        refused = refusal(response)
        if refused is not None:
            failed.append(f"could not do it: {what} ({refused})")
        elif response.status_code < 300:
            done.append(what)

    for toxic in lease.toxics:
        proxy, name = quote(toxic.proxy, safe=""), quote(toxic.name, safe="")
        settle(requests.delete(f"{url}/proxies/{proxy}/toxics/{name}", timeout=HTTP_TIMEOUT),
               f"removed toxic {toxic.name} from {toxic.proxy} on {url}")
    for disabled in lease.disabled:
        settle(requests.post(f"{url}/proxies/{quote(disabled, safe='')}", json={"enabled": True},
                             timeout=HTTP_TIMEOUT),
               f"enabled proxy {disabled} on {url}")
    for claim in lease.proxies:
        if (url, claim.name) in live_claims:
            continue  # re-created since by a live stack: theirs now
        path = f"{url}/proxies/{quote(claim.name, safe='')}"
        current = requests.get(path, timeout=HTTP_TIMEOUT)
        if current.status_code == 404:
            continue  # gone already
        if current.status_code != 200:
            failed.append(f"could not read proxy {claim.name} on {url} (HTTP {current.status_code})")
            continue
        found = current.json()
        # Delete only what is still ours: the same upstream as recorded.
        if found.get("upstream") == claim.upstream:
            settle(requests.delete(path, timeout=HTTP_TIMEOUT), f"deleted leftover proxy {claim.name} on {url}")
    return done, failed


def _start_service(root: Path, service: str) -> str:
    """Ask a stack's supervisor to start (or resume) a service a dead run left faulted."""
    try:
        if read_info(root) is None:
            return f"{service}: its stack in {root} is gone"
        control.request(root, "start", service, timeout=30.0)
    except StackError as error:
        return f"could not start {service} in {root}: {error}"
    return f"started {service} again in {root}"


def stop_processes(processes: list[OwnedProcess], *, grace: float) -> list[str]:
    """SIGTERM each recorded process group that is still ours (`_still_ours`), then SIGKILL."""
    targets = [(p.owner.pid, p.name, p.signal) for p in processes if _still_ours(p.owner)]
    for pid, _, signame in targets:
        _signal_group(pid, getattr(signal, signame, signal.SIGTERM))
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_group_alive(pid) for pid, _, _ in targets):
        time.sleep(0.05)
    for pid, _, _ in targets:
        if _group_alive(pid):
            _signal_group(pid, signal.SIGKILL)
    return [name for _, name, _ in targets]


def _still_ours(leader: Owner) -> bool:
    """The group a lease recorded, led by `leader`, has live members of that group.

    Either its leader is the same process, or the leader is gone and members remain:
    a parent-death signal kills a gunicorn master the instant the harness dies, and its
    workers (same group) lived on for seconds, longer when one was inside a request.
    Linux never hands out a pid while a process group of that number still exists, so
    a group whose leader's pid names no live process is still the recorded one; its
    members must all have started after its leader (one more read of /proc each)."""
    if leader.alive():
        return True
    if leader.pid <= 0 or leader.start is None or pid_alive(leader.pid):
        return False  # never recorded whole, or the pid now names another process: not ours
    starts = [process_start_time(member) for member in group_members(leader.pid)]
    return bool(starts) and all(start is not None and start >= leader.start for start in starts)


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signal.SIGCONT)
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone, or its pgid now names another user's processes: not ours to signal


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False  # gone, or the pgid now names another user's processes: not ours
    return group_alive(pgid)


# --- interrupted runs -------------------------------------------------------------------

def run_phase(run_dir: Path) -> str:
    """How far a run got, read from the files it left (the harness may be dead)."""
    if (run_dir / EXPORT_FILE).is_file():
        return "check"
    if (run_dir / SETTINGS_FILE).is_file():
        return "load or drain"
    return "stack start"


def mark_interrupted(run_dir: Path, *, signal_name: str | None, by: str, phase: str | None = None) -> bool:
    """Mark a run that did not finish: `interrupted.json`, and a `result.json` that says so.

    A run whose checker already wrote a verdict is left alone (it finished). Returns
    True when a mark was written.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return False
    result = _read_json(run_dir / RESULT_FILE)
    if result is not None and result.get("valid") is not None:
        return False
    marker = {
        "interrupted": True, "signal": signal_name, "phase": phase or run_phase(run_dir),
        "at": time.time(), "by": by,
        "checkable": (run_dir / EXPORT_FILE).is_file(),
    }
    if _read_json(run_dir / INTERRUPTED_FILE) is None:
        _write_json(run_dir / INTERRUPTED_FILE, marker)
    if result is None:
        _write_json(run_dir / RESULT_FILE, {"valid": None, "interrupted": marker,
                                            "run_dir": str(run_dir)})
    return True


def interrupted_marker(run_dir: Path) -> dict[str, Any] | None:
    return _read_json(Path(run_dir) / INTERRUPTED_FILE)
