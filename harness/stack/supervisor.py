"""The supervisor: the one process that owns a local stack's services.

`harness up` starts `python -m harness.stack.supervisor --root ROOT` in its own session and
waits for one JSON line on the supervisor's stdout (`{"ok": true}` once every service
is healthy, or `{"ok": false, "error": ...}`). The supervisor then keeps running after
`harness up` returns: it writes ROOT/state.json, answers process-fault requests on a
unix socket (one JSON request and one JSON response per connection) and, on SIGTERM,
stops every service by process group, removes its state and exits.

Until it has reported ready, the supervisor dies with its parent (a parent-death
SIGTERM), so a `harness up` killed mid-start leaves nothing behind; each service dies
with the supervisor (a parent-death SIGKILL), so nothing outlives it either. A stack
owned by a run (or `harness up --foreground`) keeps that parent-death signal for good
and also watches a lifeline pipe (`--lifeline-fd`): it stops when its owner dies,
however it dies.

On a shared (external) Toxiproxy the proxies carry the stack's prefix, are created
only if the name is free, are recorded in a registry lease before they are created
(so a supervisor killed with SIGKILL leaves a record the next `up`/`run`/`down`
reclaims) and are the only ones deleted at the end.

Like a production process manager, the supervisor brings back the app and the
consumers when they die on their own (a crash point's SIGKILL, a bug): `reap`, on
every pass of the control loop, notices the exit, logs it (supervisor.log and the
service's own log), marks the service `restarting` and starts it again after a
backoff (0.2 s, doubling for each quick death in a row, at most 2 s; a service that
stayed up 10 s starts over at 0.2 s), counting `restarts` in its status. What the
supervisor was asked to do is never fought: a service killed, stopped or paused
through the control socket (a process fault of the nemesis, healed by `start`) is
not restarted; Redis and Toxiproxy are not restarted either (a death of theirs stays
`exited` until a `start`). Gunicorn's own master replaces a crashed worker.

`restart_services` (a control request with `env`, optional `app_workers` and
`flush_data`) stops the app and the consumers (SIGKILL with `flush_data`: nothing of
before is kept, so nothing needs finishing), disarms the stack's crash points
(empties its crash-point folder), empties Redis if asked (FLUSHALL, while nothing of
the app is running, so the app seeds its data again as on a fresh stack), and starts
them again with the new TARGET_APP_* environment: the same stack for another app
configuration, its supervisor, Redis, Toxiproxy, proxies, ports and secrets kept.
The smoke job's lanes use it between cells (harness.run.smoke).

Ports: the supervisor picks one per service and per proxy and holds each for the
stack's life (`harness.ports.hold_ports`: a bound socket that never listens, which
keeps other pickers off it while the service's own SO_REUSEADDR bind still works), so
neither a neighbour stack starting in between nor one starting while a service is
down (a kill fault) takes it. A port taken all the same (a process binding it
explicitly) is given up for another on the first start, before anyone knows it
(PORT_ATTEMPTS ports per service or proxy); a restart keeps its port, which the app,
state.json and a run's clients know, and fails naming it (FIXED_PORT).

Everything runs on the main thread: a parent-death signal fires when the *thread*
that forked a child exits, so children must never be spawned from a helper thread.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import selectors
import shutil
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from urllib.parse import quote

import redis
import requests

from harness.names import (
    DEFAULT_GROUP,
    DEFAULT_STREAM,
    ENV_APP_GROUP,
    ENV_APP_INTERNAL_TOKEN,
    ENV_APP_REDIS_URL,
    ENV_APP_STREAM,
    ENV_APP_WEBHOOK_SECRET,
)
from harness.nemesis.fake_clock import FakeClock
from harness.nemesis.toxiproxy_client import Nemesis, NemesisConflict, NemesisError
from harness.ports import bindable, hold_ports
from harness.stack import registry
from harness.stack import services as svc
from harness.stack.info import StackError, StackInfo, control_socket_path, remove_state, write_info
from harness.stack.protocol import ServiceStatus
from harness.stack.settings import (
    DEFAULT_APP_ENV,
    SECRETS_VAR,
    StackSettings,
    clock_control_file,
    read_settings,
    write_settings,
)

ACTIONS = ("kill", "start", "pause", "resume", "restart", "status", "restart_services")
PROXIES = ("app", "redis")
CONSUMER_MIN_UPTIME = 0.5
# How long restart_services waits for a stopped app's port to close before it starts the new one.
PORT_CLOSE_TIMEOUT = 15.0
# The automatic restart of a service that died on its own (see the module docstring).
RESTART_BACKOFF_FIRST = 0.2
RESTART_BACKOFF_MAX = 2.0
RESTART_STABLE_UPTIME = 10.0
# Ports tried for one service on the first start (its own, then new ones) before it fails.
PORT_ATTEMPTS = 3
FIXED_PORT = ("a running stack's ports cannot move (state.json's URLs are known to the app, a run's "
              "checker, nemesis and load); the port is held for the service while it is down, so either "
              "its own old processes still listen or a process bound it explicitly: stop that process, "
              "or restart the stack")
# The app's crash-point folder, shared by its workers and consumers (docs/target-app.md).
CRASH_POINTS_DIR = "crash-points"
ENV_CRASH_POINTS_DIR = "TARGET_APP_CRASH_POINTS_DIR"


def restarted_automatically(name: str) -> bool:
    """The app and the consumers come back on their own; the infrastructure does not."""
    return name == "app" or name.startswith("consumer-")


def restart_backoff(previous: float | None, uptime: float) -> float:
    """How long to wait before restarting a service that just died after `uptime`
    seconds, `previous` being the wait before its last restart (None: never)."""
    if previous is None or uptime >= RESTART_STABLE_UPTIME:
        return RESTART_BACKOFF_FIRST
    return min(RESTART_BACKOFF_MAX, previous * 2)


def log_line(message: str) -> None:
    """One line in supervisor.log (the supervisor's stderr), with the time."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    print(f"{stamp} supervisor: {message}", file=sys.stderr, flush=True)


class Shutdown(BaseException):
    """Raised from the signal handler to unwind whatever the supervisor is doing.

    A BaseException, like KeyboardInterrupt: libraries (requests, urllib3) catch
    `Exception` broadly, and a shutdown they swallowed mid-health-check would let the
    supervisor finish starting a stack nobody wants any more.
    """


def _shutdown_handler(requested: list[str]) -> Callable[[int, object], None]:
    """Raise Shutdown for the first stop request only: a second one (the owner's death
    brings the lifeline's end-of-file and the parent-death SIGTERM together) must not
    abort the teardown the first one started."""

    def handler(signum: int, frame: object) -> None:
        first = not requested
        requested.append(signal.Signals(signum).name)  # seen even if the raise is swallowed
        if first:
            raise Shutdown(signal.Signals(signum).name)

    return handler


class Supervisor:
    def __init__(self, settings: StackSettings) -> None:
        self.settings = settings
        self.root = settings.root
        self.logs = self.root / "logs"
        self.services: dict[str, svc.Service] = {}
        self.started_at = time.time()
        self.secret = settings.env.get(ENV_APP_WEBHOOK_SECRET) or secrets.token_hex(16)
        # The app's internal endpoints (export, inventory) want this bearer token.
        self.internal_token = settings.env.get(ENV_APP_INTERNAL_TOKEN) or secrets.token_hex(16)
        self.proxy_names = {name: f"{settings.proxy_prefix}{name}" for name in PROXIES}
        self.lease: registry.Lease | None = None  # the proxies this stack made on a shared Toxiproxy
        self.requested: list[str] = []  # signals received (see `run`)
        self.stream = settings.env.get(ENV_APP_STREAM) or DEFAULT_STREAM
        self.group = settings.env.get(ENV_APP_GROUP) or DEFAULT_GROUP
        names = ["redis", "app", "app_proxy", "redis_proxy", *([] if settings.toxiproxy_url else ["toxiproxy"])]
        # Held for the stack's life (harness.ports): no neighbour's picker takes one
        # between the pick and the bind, or while its service is down.
        self.holds = dict(zip(names, hold_ports(len(names), svc.HOST), strict=True))
        self.ports = {name: hold.port for name, hold in self.holds.items()}
        if settings.toxiproxy_url:
            self.toxiproxy_url = settings.toxiproxy_url.rstrip("/")
            self.toxiproxy_kind = "external"
        else:
            self.toxiproxy_url = f"http://{svc.HOST}:{self.ports['toxiproxy']}"
            self.toxiproxy_kind = "server" if shutil.which("toxiproxy-server") else "embedded"
        self.phase = "starting"
        self.restarts: dict[str, int] = {}  # automatic restarts so far, by service
        self._backoff: dict[str, float] = {}  # the wait before each one's last restart
        self._restart_at: dict[str, float] = {}  # when a `restarting` service starts again

    # --- building the services -------------------------------------------------

    def _base_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TARGET_APP_") and k != SECRETS_VAR}
        env[svc.STACK_MARKER_VAR] = str(self.root)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def _app_env(self) -> dict[str, str]:
        env = self._base_env()
        env.update(DEFAULT_APP_ENV)
        env.update(self.settings.env)
        env[ENV_APP_REDIS_URL] = f"redis://{svc.HOST}:{self.ports['redis_proxy']}/0"
        env[ENV_APP_WEBHOOK_SECRET] = self.secret
        env[ENV_APP_INTERNAL_TOKEN] = self.internal_token
        if not env.get(ENV_CRASH_POINTS_DIR):
            folder = self.root / CRASH_POINTS_DIR
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            env[ENV_CRASH_POINTS_DIR] = str(folder)
        return env

    def build(self) -> None:
        self._add_redis()
        if self.toxiproxy_kind != "external":
            self._add_toxiproxy()
        self._add_app_services()

    def _add_redis(self) -> None:
        redis_port = self.ports["redis"]
        data_dir = self.root / "redis"
        data_dir.mkdir(parents=True, exist_ok=True)
        self._add(svc.ServiceSpec(
            name="redis",
            argv=[shutil.which("redis-server") or "redis-server", "--bind", svc.HOST, "--port", str(redis_port),
                  "--dir", str(data_dir), "--save", "", "--appendonly", "yes",
                  "--appendfsync", "always", "--protected-mode", "no", "--daemonize", "no"],
            env=self._base_env(), log_path=self.logs / "redis.log", port=redis_port,
            check=lambda: svc.redis_healthy(redis_port)))

    def _add_toxiproxy(self) -> None:
        port = self.ports["toxiproxy"]
        self.toxiproxy_url = f"http://{svc.HOST}:{port}"
        if self.toxiproxy_kind == "server":
            argv = [shutil.which("toxiproxy-server") or "toxiproxy-server", "-host", svc.HOST, "-port", str(port)]
        else:
            argv = svc.python_module("harness.toxiproxy", "--host", svc.HOST, "--port", str(port))
        url = self.toxiproxy_url
        self._add(svc.ServiceSpec(
            name="toxiproxy", argv=argv, env=self._base_env(),
            log_path=self.logs / "toxiproxy.log", port=port,
            check=lambda: svc.http_healthy(f"{url}/version")))

    def _add_app_services(self) -> None:
        """The app and its consumers, from the settings as they are now (`build`, and
        `restart_services` with new settings: same names, same places in the order)."""
        app_port = self.ports["app"]
        hooks = Path(__file__).with_name("gunicorn_hooks.py")
        self._add(svc.ServiceSpec(
            name="app",
            argv=svc.python_module(
                "gunicorn", "--bind", f"{svc.HOST}:{app_port}",
                "--workers", str(self.settings.app_workers), "--worker-class", "gthread",
                "--threads", "8", "--graceful-timeout", "2", "--config", str(hooks),
                "--no-control-socket",
                "target_app.wsgi:app"),
            env=self._app_env(), log_path=self.logs / "app.log", port=app_port,
            check=lambda: svc.http_healthy(f"http://{svc.HOST}:{app_port}/healthz")))
        for index in range(1, self.settings.consumers + 1):
            name = f"consumer-{index}"
            env = self._app_env()
            env["TARGET_APP_CONSUMER_NAME"] = name
            self._add(svc.ServiceSpec(
                name=name, argv=svc.python_module("target_app.consumer"), env=env,
                log_path=self.logs / f"{name}.log", port=None,
                check=lambda: True, min_uptime=CONSUMER_MIN_UPTIME))

    def _add(self, spec: svc.ServiceSpec) -> None:
        if spec.name in self.settings.fake_clocks:
            # On a fake clock whose offset a plan's clock fault changes (docs/clocks.md);
            # the file outlives restarts of the service, so its clock does too.
            clock = FakeClock(clock_control_file(self.root, spec.name)).create()
            spec = replace(spec, env={**spec.env, **clock.environment(dict(spec.env))})
        self.services[spec.name] = svc.Service(spec)

    # --- lifecycle ---------------------------------------------------------------

    def start_all(self) -> None:
        timeout = self.settings.health_timeout
        self._first_start("redis", timeout)
        if "toxiproxy" in self.services:
            self._first_start("toxiproxy", timeout)
        # The Redis proxy before the app (whose Redis it is), the app's proxy after it:
        # an app that had to move to another port is then never re-pointed.
        self._first_proxy("redis")
        self.write_state()
        self._first_start("app", timeout)
        self._first_proxy("app")
        self.write_state()
        consumers = [name for name in self.services if name.startswith("consumer-")]
        for name in consumers:
            self.services[name].start()
        self.write_state()
        for name in consumers:
            self.services[name].wait_healthy(timeout)

    def _start_and_wait(self, name: str, timeout: float) -> None:
        if self.requested:  # a shutdown raised inside a library may have been swallowed
            raise Shutdown(self.requested[0])
        service = self.services[name]
        service.start()
        self.write_state()
        service.wait_healthy(timeout)

    # --- ports on the first start ---------------------------------------------------
    #
    # Until the stack has reported ready nobody knows its ports, so one taken in spite
    # of its hold (a process that binds it explicitly) is given up for another one.
    # After that every port is known (state.json's direct URLs are read by a run's
    # checker, nemesis and load, the proxies' by the app and the load, Toxiproxy's by
    # the nemesis), so a restart keeps its port: `_start_service` says so when it is
    # taken (FIXED_PORT).

    def _move_port(self, key: str) -> None:
        """Give up the port `key` for a new held one."""
        old = self.holds[key]
        self.holds[key] = hold_ports(1, svc.HOST)[0]
        self.ports[key] = self.holds[key].port
        old.close()
        log_line(f"port {old.port} of {key} was taken by another process; moving to {self.ports[key]}")

    def _first_start(self, name: str, timeout: float) -> None:
        """`_start_and_wait`, on another port when its port was taken (bounded)."""
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                self._start_and_wait(name, timeout)
                return
            except svc.PortInUse as error:
                if attempt == PORT_ATTEMPTS:
                    raise svc.ServiceError(f"{error}; {PORT_ATTEMPTS} ports tried") from error
                service = self.services[name]
                if service.running():
                    service.stop()
                self._move_port(name)
                # The new port into its command line and into what was built from it.
                if name == "redis":
                    self._add_redis()
                elif name == "toxiproxy":
                    self._add_toxiproxy()
                else:
                    self._add_app_services()

    def _first_proxy(self, name: str) -> None:
        """Create the proxy `name`, on another listen port when its port was taken."""
        key = f"{name}_proxy"
        for attempt in range(1, PORT_ATTEMPTS + 1):
            port = self.ports[key]
            taken = not bindable(port, svc.HOST)
            if not taken:
                try:
                    self.ensure_proxies((name,))
                    return
                except svc.ServiceError as error:
                    # Toxiproxy's own words for a listen port someone took meanwhile.
                    if "address already in use" not in str(error).lower():
                        raise
                    self._forget_proxy(self.proxy_names[name])  # not created: no claim to keep
            if attempt == PORT_ATTEMPTS:
                raise svc.ServiceError(f"proxy {name}: port {port} is already in use by another process; "
                                       f"{PORT_ATTEMPTS} ports tried")
            self._move_port(key)
            if name == "redis":
                self._add_app_services()  # the app and the consumers reach Redis there

    def ensure_proxies(self, names: tuple[str, ...] = PROXIES) -> None:
        nemesis = Nemesis(self.toxiproxy_url)
        upstreams = {"app": self.ports["app"], "redis": self.ports["redis"]}
        try:
            for name in names:
                real = self.proxy_names[name]
                listen = f"{svc.HOST}:{self.ports[name + '_proxy']}"
                upstream = f"{svc.HOST}:{upstreams[name]}"
                if self.toxiproxy_kind != "external":
                    nemesis.ensure_proxy(real, listen, upstream)
                    continue
                self._record_proxy(real, listen, upstream)
                try:
                    # Plain create: a proxy of that name belongs to someone else.
                    nemesis._request("POST", "/proxies", f"create proxy {real}",
                                     {"name": real, "listen": listen, "upstream": upstream, "enabled": True})
                except NemesisConflict:
                    self._forget_proxy(real)
                    raise svc.ServiceError(
                        f"proxy {real!r} already exists on the shared Toxiproxy {self.toxiproxy_url}; "
                        "give this stack another --proxy-prefix") from None
        except NemesisError as error:
            raise svc.ServiceError(f"could not create the Toxiproxy proxies: {error}") from error

    def _record_proxy(self, name: str, listen: str, upstream: str) -> None:
        if self.lease is None:
            self.lease = registry.new_lease("stack", toxiproxy_url=self.toxiproxy_url)
            self.lease.root = str(self.root)
        self.lease.proxies.append(registry.ProxyClaim(name, listen, upstream))
        registry.write_lease(self.lease)

    def _forget_proxy(self, name: str) -> None:
        if self.lease is not None:
            self.lease.proxies = [claim for claim in self.lease.proxies if claim.name != name]
            registry.write_lease(self.lease)

    def stop_all(self) -> None:
        # In tiers, the reverse of the start: the app and the consumers together (each
        # finishing its request or message within its grace time), then Toxiproxy, then
        # Redis, so nothing loses Redis while it still writes. Within a tier every
        # service is signalled before any is waited for: the tiers' grace times overlap
        # instead of adding up.
        infrastructure = ("toxiproxy", "redis")
        tiers = [[name for name in self.services if name not in infrastructure], *([n] for n in infrastructure)]
        for tier in tiers:
            members = [self.services[name] for name in tier if name in self.services]
            for service in members:
                service.request_stop()
            for service in members:
                try:
                    service.finish_stop()
                except svc.ServiceError as error:
                    print(f"supervisor: {error}", file=sys.stderr)
        if self.lease is not None:
            # Only the proxies this stack created; a shared server keeps everyone else's.
            kept = [claim for claim in self.lease.proxies if not self._delete_proxy(claim.name)]
            if kept:
                # Owner gone soon: the next up/down reclaims them, and `down` names them.
                self.lease.proxies = kept
                registry.write_lease(self.lease)
            else:
                registry.remove_lease(self.lease.id)
        for hold in self.holds.values():
            hold.close()

    def _delete_proxy(self, name: str) -> bool:
        """Delete one of this stack's proxies on the shared Toxiproxy; False (and a line
        in the supervisor's log) when it may still be there."""
        url = f"{self.toxiproxy_url}/proxies/{quote(name, safe='')}"
        try:
            response = requests.delete(url, timeout=2)
        except requests.RequestException as error:
            print(f"supervisor: could not delete proxy {name} on {self.toxiproxy_url}: {error}", file=sys.stderr)
            return False
        refused = registry.refusal(response)
        if refused is not None:
            print(f"supervisor: could not delete proxy {name} on {self.toxiproxy_url}: {refused}", file=sys.stderr)
            return False
        return True

    # --- state -------------------------------------------------------------------

    def info(self) -> StackInfo:
        """This stack as state.json records it (docs/internals.md, "Stack state")."""
        return StackInfo(
            mode="local", phase=self.phase, started_at=self.started_at, root=str(self.root),
            app_url=f"http://{svc.HOST}:{self.ports['app_proxy']}",
            app_direct_url=f"http://{svc.HOST}:{self.ports['app']}",
            toxiproxy_url=self.toxiproxy_url, toxiproxy_kind=self.toxiproxy_kind,
            redis_url=f"redis://{svc.HOST}:{self.ports['redis']}/0",
            redis_proxy_url=f"redis://{svc.HOST}:{self.ports['redis_proxy']}/0",
            webhook_secret=self.secret, internal_token=self.internal_token,
            stream=self.stream, group=self.group,
            proxy_prefix=self.settings.proxy_prefix, proxies=dict(self.proxy_names),
            owner=self.settings.owner,
            unsafe_disable=self.settings.unsafe_disable,
            app_workers=self.settings.app_workers, consumers=self.settings.consumers,
            supervisor_pid=os.getpid(), control_socket=str(control_socket_path(self.root)),
            services=tuple(service.describe() for service in self.services.values()),
        )

    def write_state(self) -> None:
        write_info(self.root, self.info())

    # --- process faults ------------------------------------------------------------

    def handle(self, request: dict[str, object]) -> dict[str, object]:
        action = request.get("action")
        name = request.get("service")
        if action not in ACTIONS:
            return {"ok": False, "error": f"unknown action {action!r}; expected one of {', '.join(ACTIONS)}"}
        if action == "status":
            return {"ok": True, "services": self.status()}
        if action == "restart_services":
            return self.restart_services(request)
        if name not in self.services:
            known = ", ".join(self.services)
            return {"ok": False, "error": f"unknown service {name!r}; this stack has {known}"}
        service = self.services[str(name)]
        try:
            if action == "kill":
                service.kill()
            elif action == "pause":
                service.pause()
            elif action == "resume":
                service.resume()
            elif action == "start":
                self._start_service(service)
            elif action == "restart":
                service.stop()
                self._start_service(service)
        except svc.ServiceError as error:
            return {"ok": False, "error": str(error)}
        finally:
            self.write_state()
        return {"ok": True, "services": self.status()}

    def app_service_names(self) -> list[str]:
        """The services `restart_services` restarts: the app and its consumers."""
        return [name for name in self.services if restarted_automatically(name)]

    def restart_services(self, request: dict[str, object]) -> dict[str, object]:
        """The app and the consumers again, with the request's settings (module docstring)."""
        env, workers, flush = request.get("env"), request.get("app_workers"), request.get("flush_data", False)
        if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            return {"ok": False, "error": "restart_services: env must be an object of strings"}
        if workers is not None and (not isinstance(workers, int) or isinstance(workers, bool)):
            return {"ok": False, "error": "restart_services: app_workers must be an integer"}
        if not isinstance(flush, bool):
            return {"ok": False, "error": "restart_services: flush_data must be true or false"}
        try:
            settings = replace(self.settings, env=dict(env),
                               app_workers=self.settings.app_workers if workers is None else workers)
        except StackError as error:
            return {"ok": False, "error": f"restart_services: {error}"}
        # The stream, group, Redis and crash-point folder are the stack's (state.json
        # names them): an app configured elsewhere would not be this stack's any more.
        fixed = (ENV_APP_STREAM, ENV_APP_GROUP, ENV_APP_REDIS_URL, ENV_CRASH_POINTS_DIR)
        changed = [key for key in fixed if settings.env.get(key) != self.settings.env.get(key)]
        if changed:
            return {"ok": False, "error": f"restart_services: {', '.join(changed)} cannot change on a running stack"}
        names = self.app_service_names()
        members = [self.services[name] for name in names]
        try:
            if flush:
                # Nothing of before is kept: no request or message needs finishing first.
                for service in members:
                    service.kill()
            else:
                for service in members:  # all asked first: their grace times overlap
                    service.request_stop()
                for service in members:
                    service.finish_stop()
            for service in members:
                # The same port again: on a busy machine the last of the old group can
                # still hold it a moment after the stop (CI: "port ... already in use").
                service.wait_port_closed(PORT_CLOSE_TIMEOUT)
            for name in names:  # a new incarnation: no restart pending, counts from zero
                self._restart_at.pop(name, None)
                self._backoff.pop(name, None)
                self.restarts.pop(name, None)
            self._clear_crash_points()
            if flush:
                self._flush_redis()
            self.settings = settings
            write_settings(settings)
            for name in names:
                del self.services[name]
            self._add_app_services()
            log_line(f"restarting {', '.join(names)} with TARGET_APP_UNSAFE_DISABLE="
                     f"{','.join(settings.unsafe_disable) or '(none)'}, {settings.app_workers} app worker(s)"
                     f"{', Redis emptied' if flush else ''}")
            if self.requested:  # a shutdown raised inside a library may have been swallowed
                raise Shutdown(self.requested[0])
            # All at once (a consumer needs Redis, not the app): their starts overlap.
            for name in names:
                self.services[name].start()
            self.write_state()
            for name in names:
                self.services[name].wait_healthy(settings.health_timeout)
        except (svc.ServiceError, OSError, redis.RedisError) as error:
            return {"ok": False, "error": f"restart_services: {error}"}
        finally:
            self.write_state()
        return {"ok": True, "services": self.status()}

    def _clear_crash_points(self) -> None:
        """Disarm every crash point and forget its hits: empty the stack's own folder
        (one given in the environment belongs to whoever gave it: left alone)."""
        if self.settings.env.get(ENV_CRASH_POINTS_DIR):
            return
        folder = self.root / CRASH_POINTS_DIR
        if folder.is_dir():
            for entry in folder.iterdir():
                if entry.is_file():
                    entry.unlink()

    def _flush_redis(self) -> None:
        """FLUSHALL on the stack's Redis, directly (not through its proxy, which a
        fault may hold); a Redis that is down is an error, not an empty one."""
        if not self.services["redis"].running():
            raise svc.ServiceError("redis is not running: its data cannot be emptied")
        client = redis.Redis(host=svc.HOST, port=self.ports["redis"], socket_timeout=10.0,
                             socket_connect_timeout=5.0)
        try:
            client.flushall()
        finally:
            client.close()

    def _start_service(self, service: svc.Service) -> None:
        try:
            if not service.running():
                service.start()
                self.write_state()
            elif service.status == "paused":
                service.resume()
            service.wait_healthy(self.settings.health_timeout)
        except svc.PortInUse as error:
            raise svc.ServiceError(f"{error}; {FIXED_PORT}") from error
        if service.spec.name == "toxiproxy":
            self.ensure_proxies()  # an embedded Toxiproxy forgets its proxies on restart

    def status(self) -> list[ServiceStatus]:
        rows: list[ServiceStatus] = []
        for service in self.services.values():
            info = service.describe()
            rows.append(ServiceStatus(name=info.name, pid=info.pid, port=info.port, log=info.log,
                                      status=service.status, healthy=service.healthy(),
                                      restarts=self.restarts.get(info.name, 0)))
        return rows

    def reap(self) -> None:
        """Notice services that died on their own (and collect their exit status);
        restart the app and the consumers after their backoff (module docstring)."""
        changed = False
        now = time.monotonic()
        for name, service in self.services.items():
            if service.process is not None and service.status in ("running", "paused") \
                    and service.process.poll() is not None:
                changed = True
                code, uptime = service.process.returncode, now - service.started_at
                if not restarted_automatically(name):
                    service.status = "exited"
                    log_line(f"{name} (pid {service.pid}) exited with code {code}; not restarted")
                    continue
                wait = restart_backoff(self._backoff.get(name), uptime)
                self._backoff[name] = wait
                self._restart_at[name] = now + wait
                service.status = "restarting"
                log_line(f"{name} (pid {service.pid}) exited with code {code} after {uptime:.1f} s "
                         f"without being asked to; restarting it in {wait:.1f} s")
            elif service.status == "restarting" and now >= self._restart_at.get(name, 0.0):
                changed = True
                self._restart(name, service, now)
        if changed:
            self.write_state()

    def _restart(self, name: str, service: svc.Service, now: float) -> None:
        try:
            service.start()
        except svc.ServiceError as error:
            if isinstance(error, svc.PortInUse):
                error = svc.ServiceError(f"{error}; {FIXED_PORT}")
            wait = restart_backoff(self._backoff.get(name), 0.0)
            self._backoff[name] = wait
            self._restart_at[name] = now + wait
            log_line(f"{name} could not be restarted ({error}); trying again in {wait:.1f} s")
            return
        self.restarts[name] = self.restarts.get(name, 0) + 1
        log_line(f"{name} restarted (pid {service.pid}, restart {self.restarts[name]})")
        with open(service.spec.log_path, "a") as log:
            log.write(f"--- restarted by the supervisor (restart {self.restarts[name]}) ---\n")


def _report(message: dict[str, object]) -> bool:
    """Tell `harness up` how the start went; False when it is no longer listening."""
    try:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()
    except (BrokenPipeError, OSError):
        return False
    finally:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    return True


def _send(conn: socket.socket, response: dict[str, object]) -> None:
    try:
        conn.sendall(json.dumps(response).encode() + b"\n")
    except OSError:
        pass  # the client hung up: the answer has no reader, the action itself is done
    finally:
        conn.close()


def bind_control_socket(root: Path) -> socket.socket:
    """Listen on the control socket (before reporting ready, so callers can use it at once)."""
    path = control_socket_path(root)
    if path.exists():
        path.unlink()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(16)
    return listener


def serve(supervisor: Supervisor, listener: socket.socket, lifeline_fd: int | None = None,
          requested: list[str] | None = None) -> None:
    """Answer control requests one at a time until a signal raises Shutdown
    (or the owner's lifeline reaches end-of-file: the owner is gone)."""
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "control")
    if lifeline_fd is not None:
        selector.register(lifeline_fd, selectors.EVENT_READ, "lifeline")
    while True:
        if requested:
            raise Shutdown(requested[0])
        supervisor.reap()
        events = selector.select(timeout=0.2)
        if any(key.data == "lifeline" for key, _ in events):
            assert lifeline_fd is not None
            if not os.read(lifeline_fd, 4096):
                if requested is not None:
                    requested.append("lifeline")  # a parent-death SIGTERM may follow: no second raise
                raise Shutdown("the owner's lifeline closed")
        if not any(key.data == "control" for key, _ in events):
            continue
        for conn, request in _requests_once(listener):
            try:
                response = supervisor.handle(request)
            except Exception as error:  # noqa: BLE001 - one bad request must not end the stack
                traceback.print_exc()
                response = {"ok": False, "error": f"supervisor failed: {type(error).__name__}: {error}"}
            _send(conn, response)


def _requests_once(listener: socket.socket) -> list[tuple[socket.socket, dict[str, object]]]:
    conn, _ = listener.accept()
    conn.settimeout(5.0)
    try:
        data = b""
        while not data.endswith(b"\n") and len(data) < 65536:
            chunk = conn.recv(4096)
            if not chunk:
                break
            data += chunk
        request = json.loads(data or b"{}")
        if not isinstance(request, dict):
            raise ValueError("request is not an object")
    except (OSError, ValueError) as error:
        _send(conn, {"ok": False, "error": f"bad request: {error}"})
        return []
    return [(conn, request)]


def run(root: Path, lifeline_fd: int | None = None) -> int:
    requested: list[str] = []  # the signals received, checked again where a raise could be lost
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _shutdown_handler(requested))
    parent = os.getppid()
    settings = read_settings(root)
    supervisor = Supervisor(settings)
    supervisor.requested = requested
    listener: socket.socket | None = None
    try:
        try:
            supervisor.build()
            supervisor.start_all()
            if requested:
                raise Shutdown(requested[0])
            listener = bind_control_socket(root)
        except (svc.ServiceError, OSError) as error:
            _report({"ok": False, "error": str(error)})
            return 1
        except Exception as error:  # noqa: BLE001 - a bug here must still reach `harness up`
            traceback.print_exc()
            _report({"ok": False, "error": f"supervisor failed: {type(error).__name__}: {error}"})
            return 1
        supervisor.phase = "running"
        supervisor.write_state()
        if settings.owner == "up":
            # From here the stack must outlive `harness up`; if it died meanwhile,
            # the report fails (nobody reads the pipe) and we tear down. A stack
            # owned by a run keeps the parent-death signal: it goes with its owner.
            svc.set_parent_death_signal(0)
        if os.getppid() != parent or not _report({"ok": True}):
            return 1
        serve(supervisor, listener, lifeline_fd, requested)
        return 0
    except Shutdown:
        return 0
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)
        supervisor.phase = "stopping"
        try:
            supervisor.write_state()
        except OSError as error:  # stopping regardless; the state file goes just after
            print(f"supervisor: could not record the stopping phase: {error}", file=sys.stderr)
        if listener is not None:
            listener.close()
        supervisor.stop_all()
        remove_state(root)
        registry.unregister_stack(root)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.stack.supervisor")
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--lifeline-fd", type=int, help="read end of the owner's lifeline pipe")
    args = parser.parse_args(argv)
    return run(args.root.resolve(), args.lifeline_fd)


if __name__ == "__main__":
    sys.exit(main())
