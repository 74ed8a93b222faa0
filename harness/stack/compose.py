"""The stack under docker compose: the same handle as the local stack, backed by
`docker compose` and `docker` commands instead of a supervisor.

URLs come from the compose file's published ports, so the file is the one source
of truth; the Toxiproxy proxies come from `compose/toxiproxy.json` (the real
Toxiproxy image creates them at start) and are checked, not created, here. The
webhook secret and the internal token (`TARGET_APP_INTERNAL_TOKEN`, for the app's
`/internal/v1/*` endpoints) are the file's `${VAR:-default}` values, or the caller's
own when set; `state.json` records both. A compose stack is entered in the registry
like a local one.

This module imports nothing of the local stack (`harness.stack.local`); the local
module picks between the two when it starts or opens a stack.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from harness.documents import load_yaml
from harness.names import (
    DEFAULT_GROUP,
    DEFAULT_STREAM,
    ENV_APP_GROUP,
    ENV_APP_INTERNAL_TOKEN,
    ENV_APP_REDIS_URL,
    ENV_APP_STREAM,
    ENV_APP_WEBHOOK_SECRET,
    ENV_SEED,
    HISTORIES_DIR,
)
from harness.nemesis.stack_proxies import FaultRecorder, StackNemesis, stack_nemesis
from harness.nemesis.toxiproxy_client import Nemesis, NemesisError
from harness.process_handle import ProcessGuard, ProcessHandle
from harness.stack import registry
from harness.stack.info import (
    ServiceInfo,
    StackAlreadyRunning,
    StackError,
    StackInfo,
    current_info,
    read_info,
    remove_state,
    write_info,
)
from harness.stack.private_files import private_dir
from harness.stack.protocol import ServiceStatus
from harness.stack.settings import StackSettings

PROJECT = "idempotency-harness"
CORE_SERVICES = ("redis", "toxiproxy", "app", "consumer")
PROXIES = ("app", "redis")
_DEFAULT = re.compile(r"^\$\{(?P<name>[A-Z0-9_]+):?-(?P<default>[^}]*)\}$")


@dataclass(frozen=True)
class ComposeLayout:
    """What the harness needs to know of a compose file."""

    file: Path
    app_url: str
    app_direct_url: str
    toxiproxy_url: str
    redis_url: str
    redis_proxy_url: str
    webhook_secret: str
    internal_token: str
    stream: str
    group: str


def load_compose(file: Path) -> dict[str, Any]:
    document = load_yaml(Path(file), error=StackError, what="the compose file")
    if not isinstance(document, dict) or not isinstance(document.get("services"), dict):
        raise StackError(f"{file} has no services")
    return document


def published_port(service: Mapping[str, Any], container_port: int) -> int:
    """The host port a service publishes for container_port ("[ip:]host:container")."""
    for entry in service.get("ports", []):
        parts = str(entry).split("/")[0].split(":")
        if len(parts) >= 2 and int(parts[-1]) == container_port:
            return int(parts[-2])
    raise StackError(f"container port {container_port} is not published")


def env_default(value: str, environ: Mapping[str, str]) -> str:
    """`${VAR:-default}` as compose would expand it with environ; plain values as they are."""
    match = _DEFAULT.match(str(value))
    if not match:
        return str(value)
    return environ.get(match["name"]) or match["default"]


def read_layout(file: Path, environ: Mapping[str, str] | None = None) -> ComposeLayout:
    environ = os.environ if environ is None else environ
    services = load_compose(file)["services"]
    for name in CORE_SERVICES:
        if name not in services:
            raise StackError(f"{file} has no service {name!r}")
    toxiproxy = services["toxiproxy"]
    app_env = services["app"].get("environment", {})
    redis_proxy_port = int(str(app_env[ENV_APP_REDIS_URL]).rsplit(":", 1)[1].split("/")[0])
    try:
        return ComposeLayout(
            file=Path(file).resolve(),
            app_url=f"http://127.0.0.1:{published_port(toxiproxy, 8666)}",
            app_direct_url=f"http://127.0.0.1:{published_port(services['app'], 8000)}",
            toxiproxy_url=f"http://127.0.0.1:{published_port(toxiproxy, 8474)}",
            redis_url=f"redis://127.0.0.1:{published_port(services['redis'], 6379)}/0",
            redis_proxy_url=f"redis://127.0.0.1:{published_port(toxiproxy, redis_proxy_port)}/0",
            webhook_secret=env_default(app_env.get(ENV_APP_WEBHOOK_SECRET, ""), environ),
            internal_token=env_default(app_env.get(ENV_APP_INTERNAL_TOKEN, ""), environ),
            stream=env_default(app_env.get(ENV_APP_STREAM, DEFAULT_STREAM), environ),
            group=env_default(app_env.get(ENV_APP_GROUP, DEFAULT_GROUP), environ),
        )
    except (KeyError, ValueError, StackError) as error:
        raise StackError(f"{file}: {error}") from error


def _docker() -> str:
    docker = shutil.which("docker")
    if docker is None:
        raise StackError("docker is not on PATH; --compose needs Docker with the compose plugin")
    return docker


def docker(args: Sequence[str], *, timeout: float = 60.0, env: Mapping[str, str] | None = None) -> str:
    command = [_docker(), *args]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                                env=dict(env) if env is not None else None)
    except subprocess.TimeoutExpired:
        raise StackError(f"`docker {' '.join(args)}` did not finish within {timeout:.0f}s") from None
    if result.returncode != 0:
        detail = [line for line in (result.stderr or result.stdout).splitlines() if line.strip()]
        raise StackError(f"`docker {' '.join(args)}` failed: {detail[0] if detail else result.returncode}")
    return result.stdout


class ComposeStack:
    """The compose services behind the `Stack` protocol (harness.stack.protocol)."""

    def __init__(self, root: Path, info: StackInfo) -> None:
        if info.compose_file is None or info.project is None:
            raise StackError(f"{root}: not a compose stack's state (no compose_file or project)")
        self.root = root
        self._info = info
        self.compose_file: str = info.compose_file
        self.project: str = info.project

    @property
    def info(self) -> StackInfo:
        """The state file as it is now; the last good one once it is gone."""
        self._info = current_info(self.root, last=self._info)
        return self._info

    def __enter__(self) -> ComposeStack:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.down()

    def _compose(self, *args: str, timeout: float = 60.0) -> str:
        return docker(["compose", "-f", self.compose_file, "-p", self.project, *args], timeout=timeout)

    def container(self, service: str) -> str:
        self._info.service(service)  # StackError naming the known services
        base, _, index = service.partition("-")
        return f"{self.project}-{base}-{index or 1}"

    def kill(self, service: str) -> None:
        docker(["kill", "--signal", "SIGKILL", self.container(service)])

    def start(self, service: str) -> None:
        docker(["start", self.container(service)])
        self._wait_healthy(service)

    def pause(self, service: str) -> None:
        docker(["pause", self.container(service)])

    def resume(self, service: str) -> None:
        docker(["unpause", self.container(service)])

    def restart(self, service: str) -> None:
        docker(["restart", self.container(service)])
        self._wait_healthy(service)

    def _wait_healthy(self, service: str) -> None:
        deadline = time.monotonic() + (self._info.health_timeout or 60.0)
        while time.monotonic() < deadline:
            if self.health().get(service):
                return
            time.sleep(0.5)
        raise StackError(f"{service} not healthy; see `docker compose logs {service.split('-')[0]}`")

    def services(self) -> list[ServiceStatus]:
        rows: list[ServiceStatus] = []
        containers = {service.name: self.container(service.name) for service in self._info.services}
        # RestartCount: how often docker's `restart:` policy brought the container back.
        output = docker(["inspect", "--format",
                         "{{.Name}} {{.State.Status}} {{.RestartCount}} "
                         "{{if .State.Health}}{{.State.Health.Status}}{{end}}",
                         *containers.values()])
        found: dict[str, tuple[str, int | None, str]] = {}
        for line in output.splitlines():
            parts = line.strip().lstrip("/").split()
            if not parts:
                continue
            rest = parts[2:]
            restarts = int(rest.pop(0)) if rest and rest[0].isdigit() else None
            found[parts[0]] = (parts[1] if len(parts) > 1 else "unknown", restarts, rest[0] if rest else "")
        for service in self._info.services:
            status, restarts, health = found.get(containers[service.name], ("missing", None, ""))
            rows.append(ServiceStatus(name=service.name, pid=None, port=service.port, log=None, status=status,
                                      healthy=status == "running" and health in ("healthy", ""),
                                      restarts=restarts))
        return rows

    def health(self) -> dict[str, bool]:
        return {row["name"]: row["healthy"] for row in self.services()}

    def nemesis(self, recorder: FaultRecorder | None = None) -> StackNemesis:
        """A `StackNemesis` on the compose Toxiproxy (proxies app and redis)."""
        return stack_nemesis(self.info, recorder)

    def down(self) -> None:
        # The volumes hold one run's test data; the next stack must start empty or
        # its checker would meet orders no history of its own explains.
        self._compose("down", "--volumes", "--remove-orphans", timeout=120.0)
        remove_state(self.root)
        registry.unregister_stack(self.root)


def start_compose_stack(settings: StackSettings) -> ComposeStack:
    root = settings.root.resolve()
    if read_info(root) is not None:
        raise StackAlreadyRunning(f"a stack is already recorded in {root}; `harness down` first")
    layout = read_layout(settings.compose_file or Path("docker-compose.yml"))
    env = dict(os.environ)
    env.update(settings.env)
    env["APP_WORKERS"] = str(settings.app_workers)
    docker(["compose", "-f", str(layout.file), "-p", PROJECT, "up", "-d", "--wait",
            "--scale", f"consumer={settings.consumers}", *CORE_SERVICES],
           timeout=settings.health_timeout * 4 + 60, env=env)
    try:
        proxies = Nemesis(layout.toxiproxy_url).proxies()
    except NemesisError as error:
        raise StackError(f"the compose Toxiproxy does not answer: {error}") from error
    missing = [name for name in PROXIES if name not in proxies]
    if missing:
        raise StackError(f"the compose Toxiproxy has no proxy {', '.join(missing)}; "
                         "check compose/toxiproxy.json")
    services = (
        ServiceInfo(name="redis", pid=None, port=_url_port(layout.redis_url), log=None),
        ServiceInfo(name="toxiproxy", pid=None, port=_url_port(layout.toxiproxy_url), log=None),
        ServiceInfo(name="app", pid=None, port=_url_port(layout.app_direct_url), log=None),
    ) + tuple(ServiceInfo(name=f"consumer-{i}", pid=None, port=None, log=None)
              for i in range(1, settings.consumers + 1))
    info = StackInfo(
        mode="compose", phase="running", started_at=time.time(), root=str(root),
        app_url=layout.app_url, app_direct_url=layout.app_direct_url,
        toxiproxy_url=layout.toxiproxy_url, toxiproxy_kind="compose",
        redis_url=layout.redis_url, redis_proxy_url=layout.redis_proxy_url,
        webhook_secret=settings.env.get(ENV_APP_WEBHOOK_SECRET) or layout.webhook_secret,
        internal_token=settings.env.get(ENV_APP_INTERNAL_TOKEN) or layout.internal_token,
        stream=layout.stream, group=layout.group,
        proxy_prefix="", proxies={name: name for name in PROXIES}, owner=settings.owner,
        unsafe_disable=settings.unsafe_disable,
        app_workers=settings.app_workers, consumers=settings.consumers,
        compose_file=str(layout.file), project=PROJECT, health_timeout=settings.health_timeout,
        services=services,
    )
    private_dir(root)  # 0700: state.json holds the secrets
    write_info(root, info)
    registry.register_stack(root, owner=settings.owner, mode="compose")
    return ComposeStack(root, info)


def _url_port(url: str) -> int:
    port = urlsplit(url).port
    if port is None:
        raise StackError(f"{url} names no port")
    return port


# Where the compose file mounts the run directory in the Locust containers
# (docker-compose.yml, x-locust) and where the image keeps the locustfiles.
CONTAINER_RUN_DIR = "/srv/harness/run"
CONTAINER_LOCUSTFILES = "harness/locustfiles"
LOCUST_SERVICES = ("locust-master", "locust-worker")


class ComposeLocust(ProcessHandle):
    """A headless run on the compose file's Locust master and `workers` workers, with
    LocustProcess's interface (start, finished, returncode, stop, log_path; the first
    three from `ProcessHandle`), so the runner drives either the same way.

    The master runs with `docker compose run` (headless, `--expect-workers N`, the
    run's options on its command line, `--use-aliases` so the workers find it as
    `locust-master`), the workers with `up --scale locust-worker=N`. The run
    directory is mounted into all of them (HARNESS_RUN_DIR): the histories, the CSV
    and the HTML report land where `harness run` reads them. The containers run as
    the caller's uid (HARNESS_UID/HARNESS_GID) so those files are the caller's.
    """

    def __init__(self, *, info: StackInfo, scenario: str, users: int, spawn_rate: float,
                 duration: float, workers: int, run_dir: Path, seed: int,
                 stop_timeout: float = 3.0, guard: ProcessGuard | None = None,
                 environ: Mapping[str, str] | None = None) -> None:
        super().__init__()
        if info.mode != "compose" or info.compose_file is None:
            raise StackError("--scale-workers needs a compose stack (`--compose`, or `harness up --compose`)")
        if workers < 1:
            raise StackError("--scale-workers must be at least 1")
        self.compose_file = info.compose_file
        self.project = info.project or PROJECT
        self.scenario = scenario
        self.users = users
        self.spawn_rate = spawn_rate
        self.duration = duration
        self.workers = workers
        self.run_dir = Path(run_dir).resolve()
        self.stop_timeout = stop_timeout
        self.guard = guard
        self.log_path = self.run_dir / "locust" / "locust.log"
        self.master_name = f"{self.project}-locust-master-run-{os.getpid()}-{id(self) & 0xFFFF:04x}"
        env = dict(os.environ if environ is None else environ)
        # The values the compose file interpolates into the Locust services.
        env.update({
            "HARNESS_RUN_DIR": str(self.run_dir),
            ENV_SEED: str(seed),
            "HARNESS_UID": str(os.getuid()),
            "HARNESS_GID": str(os.getgid()),
            ENV_APP_WEBHOOK_SECRET: info.webhook_secret,
            ENV_APP_STREAM: info.stream,
            "LOCUSTFILE": f"{CONTAINER_LOCUSTFILES}/{scenario}.py",
        })
        self.env = env

    def _compose_args(self) -> list[str]:
        return ["compose", "-f", self.compose_file, "-p", self.project]

    def master_command(self) -> list[str]:
        out = f"{CONTAINER_RUN_DIR}/locust"
        return [*self._compose_args(), "run", "--rm", "--no-deps", "--use-aliases", "-T",
                "--name", self.master_name, "locust-master",
                "locust", "-f", f"{CONTAINER_LOCUSTFILES}/{self.scenario}.py", "--master", "--headless",
                "--expect-workers", str(self.workers), "--expect-workers-max-wait", "120",
                "--users", str(self.users), "--spawn-rate", f"{self.spawn_rate:g}",
                "--run-time", f"{max(1, round(self.duration))}s", "--stop-timeout", f"{self.stop_timeout:g}",
                "--host", "http://toxiproxy:8666",
                "--csv", f"{out}/stats", "--html", f"{out}/report.html", "--only-summary",
                # Deliberate duplicates get 4xx answers: data for the checker, not a failure.
                "--exit-code-on-error", "0"]

    def workers_command(self) -> list[str]:
        return [*self._compose_args(), "up", "-d", "--no-deps",
                "--scale", f"locust-worker={self.workers}", "locust-worker"]

    def start(self, *, master_timeout: float = 60.0) -> None:
        # Made here, as the caller, so the bind mounts are the caller's directories
        # (docker would create missing ones as root).
        for sub in (HISTORIES_DIR, "locust"):
            (self.run_dir / sub).mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                [_docker(), *self.master_command()], stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env=self.env, start_new_session=True)
        if self.guard is not None:
            self.guard.add_process(self._process.pid, "locust")
        # The workers resolve `locust-master` when they start: only once its container runs.
        deadline = time.monotonic() + master_timeout
        while True:
            if self._process.poll() is not None:
                raise StackError(f"the compose Locust master exited with {self._process.returncode}; "
                                 f"see {self.log_path}")
            try:
                if docker(["inspect", "--format", "{{.State.Running}}", self.master_name],
                          timeout=10.0).strip() == "true":
                    break
            except StackError:
                pass  # not created yet
            if time.monotonic() > deadline:
                raise StackError(f"the compose Locust master did not start within {master_timeout:.0f}s; "
                                 f"see {self.log_path}")
            time.sleep(0.5)
        docker(self.workers_command(), timeout=120.0, env=self.env)

    def stop(self, *, grace: float = 15.0) -> None:
        """Stop the master (Locust stops its workers), then remove the workers' containers."""
        if self._process is not None and self._process.poll() is None:
            try:
                docker(["kill", "--signal", "SIGTERM", self.master_name], timeout=10.0)
            except StackError:
                pass  # already gone, or docker cannot reach it: the wait and the SIGKILL below end it anyway
            try:
                self._process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self._process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass  # it exited between the wait and the signal
                self._process.wait(timeout=5.0)
        try:
            docker([*self._compose_args(), "rm", "--stop", "--force", "locust-worker"],
                   timeout=60.0, env=self.env)
        except StackError as error:
            # The run goes on to its check; `harness down` removes whatever is left.
            print(f"harness: could not remove the compose Locust workers: {error}", file=sys.stderr)
        if self._process is not None and self.guard is not None:
            self.guard.remove_process(self._process.pid)
