"""Every setting of a load process, as a Locust command-line option.

`add_options(parser)` registers them (a locustfile does it through
`harness.load.recording.install`, on `events.init_command_line_parser`), so they
show in `locust --help` and in the web UI's start form (the webhook secret as a
masked field), and Locust itself passes them from the master to its workers (they
are in `environment.parsed_options`, which every spawn message carries).

Each option falls back to an environment variable (the runner and `harness status
--env` still set those; their names are in `harness.names`), and four of them (redis
url, stream, webhook secret, toxiproxy url) and the target host fall back to the state
file of a stack started by `harness up` (`.harness/state.json` under the current
directory, or `--harness-root`), read as a `harness.stack.info.StackInfo` (stdlib
only, so the Locust process stays light), so a locustfile run by hand against that
stack needs nothing set. Precedence: command line, environment, the stack's state,
the built-in default.

`LoadSettings.from_options(parsed_options)` is the typed view every consumer reads;
`LoadSettings.to_options()` writes resolved values back, as plain values Locust can
send to workers (msgpack: no Path objects).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.durations import parse_duration
from harness.errors import HarnessError
from harness.names import (
    DEFAULT_STACK_ROOT,
    DEFAULT_STREAM,
    ENV_APP_WEBHOOK_SECRET,
    ENV_FRESH_CONNECTIONS,
    ENV_HISTORY_DIR,
    ENV_REDIS_URL,
    ENV_REQUEST_TIMEOUT,
    ENV_ROOT,
    ENV_SEED,
    ENV_SKUS,
    ENV_STREAM,
    ENV_THINK_TIME,
    ENV_TOXIPROXY_URL,
    ENV_WEBHOOK_SECRET,
    HISTORIES_DIR,
)
from harness.process_handle import pid_alive
from harness.stack.info import StackError, StackInfo, read_info

DEFAULT_ROOT = str(DEFAULT_STACK_ROOT)
DEFAULT_SECRET = "dev-webhook-secret"
DEFAULT_SKUS = "sku-1"
# Seconds each user waits between two of its tasks, drawn uniformly from (low, high).
# Short, so the users press the app as hard as a real burst of retries; a job that
# runs many loads side by side on a few cores (the smoke job) asks for longer waits,
# or the loads take the CPU the other runs need to start and stop.
DEFAULT_THINK_TIME = (0.0, 0.05)


class LoadConfigError(HarnessError, ValueError):
    """A load option (or its environment variable) has a value that cannot be used."""


@dataclass(frozen=True)
class OptionSpec:
    """One harness option: its flag, the environment variables it falls back to, its help."""

    flag: str
    env: tuple[str, ...]
    help: str
    kind: type = str
    secret: bool = False

    @property
    def dest(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")


OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("--harness-root", (ENV_ROOT,),
               "state directory of a stack started by `harness up`, read for the target host, "
               f"redis url, stream, webhook secret and toxiproxy url not given (default {DEFAULT_ROOT}; "
               "empty: read no stack)"),
    OptionSpec("--harness-history-dir", (ENV_HISTORY_DIR,),
               "directory of the Jepsen histories, one file per load process (workers send theirs "
               "to the master, which writes them here). Default with a discovered stack: "
               "runs/swarm-<time>-<pid>/histories; otherwise nothing is recorded"),
    OptionSpec("--harness-redis-url", (ENV_REDIS_URL,),
               "Redis to publish stream messages to (default: the stack's)"),
    OptionSpec("--harness-stream", (ENV_STREAM,),
               f"stream to publish to (default: the stack's, else {DEFAULT_STREAM})"),
    OptionSpec("--harness-webhook-secret", (ENV_WEBHOOK_SECRET, ENV_APP_WEBHOOK_SECRET),
               f"HMAC secret that signs webhooks; must match the app's (default: the stack's, "
               f"else {DEFAULT_SECRET})", secret=True),
    OptionSpec("--harness-seed", (ENV_SEED,), "seed of the users' choices (default 0)", int),
    OptionSpec("--harness-fresh-connections", (ENV_FRESH_CONNECTIONS,),
               "a new TCP connection per request, so Toxiproxy picks toxicity per request "
               "(0 or 1, default 1)", bool),
    OptionSpec("--harness-request-timeout", (ENV_REQUEST_TIMEOUT,),
               "client timeout in seconds, per connect and per read (default 2)", float),
    OptionSpec("--harness-think-time", (ENV_THINK_TIME,),
               "seconds each user waits between two tasks: LOW-HIGH (drawn uniformly) or one "
               "duration, e.g. 0.1-0.2 or 100ms-200ms (default 0-0.05)"),
    OptionSpec("--harness-skus", (ENV_SKUS,),
               f"comma list of SKUs to order (default {DEFAULT_SKUS})"),
    OptionSpec("--harness-toxiproxy-url", (ENV_TOXIPROXY_URL,),
               "Toxiproxy API, to record whether a request met an active toxic "
               "(default: the stack's)"),
)
_BUILTIN: Mapping[str, Any] = {
    "harness_root": DEFAULT_ROOT, "harness_seed": 0, "harness_fresh_connections": True,
    "harness_request_timeout": 2.0, "harness_skus": DEFAULT_SKUS,
    "harness_think_time": "",
}


def parse_bool(text: str | bool) -> bool:
    if isinstance(text, bool):
        return text
    value = str(text).strip().lower()
    if value in ("1", "true", "yes", "on", ""):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected 0 or 1, got {text!r}")


def _env_default(spec: OptionSpec, environ: Mapping[str, str]) -> Any:
    for name in spec.env:
        raw = environ.get(name, "")
        if spec.dest == "harness_root" and name in environ:
            return raw.strip()  # set but empty: read no stack
        if raw.strip():
            return raw if spec.secret else raw.strip()
    # Strings default to "" (not None) so the web UI shows an empty field and
    # posts back a string; typed options keep their type for the form.
    return _BUILTIN.get(spec.dest, "")


# The load's length in seconds from its start (Locust's test_start), the harness's
# own counterpart of Locust's --run-time (harness.load.recording installs it).
RUN_TIME_FLAG = "--harness-run-time"
# When set, the load ends as soon as this file exists (harness.load.run_time).
STOP_FILE_ENV = "HARNESS_LOAD_STOP_FILE"


def add_options(parser: Any, environ: Mapping[str, str] | None = None) -> None:
    """Register every option on Locust's parser (or a plain argparse parser, for tests)."""
    env = os.environ if environ is None else environ
    locust_parser = hasattr(parser, "args_included_in_web_ui")
    # On the parser itself: Locust's web UI flags (include_in_web_ui, is_secret) are
    # understood by LocustArgumentParser.add_argument, not by argument groups.
    for spec in OPTIONS:
        extra: dict[str, Any] = {}
        if locust_parser:
            extra = {"include_in_web_ui": True, "is_secret": spec.secret}
        converter = {int: _int, float: _float, bool: parse_bool}.get(spec.kind, str)
        names = " or ".join(f"${name}" for name in spec.env)
        parser.add_argument(spec.flag, type=converter, default=_env_default(spec, env),
                           help=f"{spec.help} [env {names}]", metavar=spec.kind.__name__.upper()
                           if spec.kind is not bool else "0|1", **extra)


def parse_think_time(text: str) -> tuple[float, float]:
    """(low, high) seconds from `LOW-HIGH` or one duration (both ends equal); "" is
    the default. LoadConfigError, naming the option, when it is neither."""
    cleaned = str(text).strip()
    if not cleaned:
        return DEFAULT_THINK_TIME
    low_text, separator, high_text = cleaned.partition("-")
    try:
        low = parse_duration(low_text)
        high = parse_duration(high_text) if separator else low
    except ValueError as error:
        raise LoadConfigError(f"--harness-think-time: {error}") from None
    if high < low:
        raise LoadConfigError(f"--harness-think-time: {cleaned!r} ends below its start")
    return low, high


def format_think_time(think_time: tuple[float, float]) -> str:
    """The option's text for (low, high): what `parse_think_time` reads back."""
    return f"{think_time[0]:g}-{think_time[1]:g}"


def _int(text: str) -> int:
    try:
        return int(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def _float(text: str) -> float:
    try:
        return float(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


@dataclass(frozen=True)
class LoadSettings:
    """What a load process needs; `stack_root` and `host` only when a stack was read."""

    history_dir: Path | None = None
    redis_url: str | None = None
    stream: str = DEFAULT_STREAM
    webhook_secret: str = field(default=DEFAULT_SECRET, repr=False)  # never in a log line
    seed: int = 0
    fresh_connections: bool = True
    request_timeout: float = 2.0
    skus: tuple[str, ...] = (DEFAULT_SKUS,)
    think_time: tuple[float, float] = DEFAULT_THINK_TIME
    toxiproxy_url: str | None = None
    stack_root: Path | None = None
    host: str | None = None
    stack: StackInfo | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_options(cls, parsed_options: Any, *, discover: bool = True) -> LoadSettings:
        """The settings in Locust's parsed options (an argparse Namespace or a dict).

        Values posted by the web UI's form arrive as strings and are converted here.
        Values left empty are taken from the stack's state file when one is running
        under `harness_root` (unless `discover` is False).
        """
        values = parsed_options if isinstance(parsed_options, Mapping) else vars(parsed_options or {})

        def text(dest: str) -> str:
            value = values.get(dest)
            return "" if value is None else str(value).strip()

        root_text = text("harness_root") if "harness_root" in values else DEFAULT_ROOT
        stack_root, stack = (find_stack(Path(root_text)) if discover and root_text else (None, None))

        def given_or(dest: str, from_stack: str | None) -> str:
            return text(dest) or (from_stack or "")

        skus = tuple(s.strip() for s in (text("harness_skus") or DEFAULT_SKUS).split(",") if s.strip())
        if not skus:
            raise LoadConfigError("--harness-skus: expected a comma list of SKUs")
        try:
            fresh = parse_bool(values.get("harness_fresh_connections", True))
        except argparse.ArgumentTypeError as error:
            raise LoadConfigError(f"--harness-fresh-connections: {error}") from None
        timeout = _number("harness_request_timeout", values.get("harness_request_timeout"), 2.0)
        if timeout <= 0:
            raise LoadConfigError("--harness-request-timeout must be > 0")
        history = text("harness_history_dir")
        secret = values.get("harness_webhook_secret")
        secret = secret if isinstance(secret, str) and secret else (stack.webhook_secret if stack else "")
        return cls(
            history_dir=Path(history) if history else None,
            redis_url=given_or("harness_redis_url", stack.redis_url if stack else None) or None,
            stream=given_or("harness_stream", stack.stream if stack else None) or DEFAULT_STREAM,
            webhook_secret=secret or DEFAULT_SECRET,
            seed=int(_number("harness_seed", values.get("harness_seed"), 0)),
            fresh_connections=fresh,
            request_timeout=timeout,
            skus=skus,
            think_time=parse_think_time(text("harness_think_time")),
            toxiproxy_url=given_or("harness_toxiproxy_url", stack.toxiproxy_url if stack else None) or None,
            stack_root=stack_root,
            host=(stack.app_url or None) if stack else None,
            stack=stack,
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, discover: bool = False) -> LoadSettings:
        """The settings from environment variables alone (what the options default to)."""
        env = os.environ if environ is None else environ
        return cls.from_options({spec.dest: _env_default(spec, env) for spec in OPTIONS}, discover=discover)

    def to_options(self) -> dict[str, Any]:
        """The parsed_options values of these settings: plain types, resolved.

        `harness_root` becomes the stack's absolute root (or "" when none was read),
        so a worker on another machine never reads a stack of its own instead.
        """
        return {
            "harness_root": str(self.stack_root) if self.stack_root else "",
            "harness_history_dir": str(self.history_dir) if self.history_dir else "",
            "harness_redis_url": self.redis_url or "",
            "harness_stream": self.stream,
            "harness_webhook_secret": self.webhook_secret,
            "harness_seed": self.seed,
            "harness_fresh_connections": self.fresh_connections,
            "harness_request_timeout": self.request_timeout,
            "harness_skus": ",".join(self.skus),
            "harness_think_time": format_think_time(self.think_time),
            "harness_toxiproxy_url": self.toxiproxy_url or "",
        }


def find_stack(root: Path) -> tuple[Path | None, StackInfo | None]:
    """(root, info) of the stack running in `root`, or (None, None).

    Only the state file is read (no side effects, unlike `harness.stack.local.open_stack`);
    a state whose supervisor is gone is stale and ignored. A compose stack has no
    supervisor, its state is taken as it is. A state file that is not a stack's is
    a LoadConfigError naming the file and the field.
    """
    root = Path(root).expanduser().resolve()
    try:
        info = read_info(root)
    except StackError as error:
        raise LoadConfigError(str(error)) from error
    if info is None:
        return None, None
    if info.supervisor_pid is not None and not pid_alive(info.supervisor_pid):
        return None, None
    return root, info




def swarm_history_dir(runs_root: Path = Path("runs")) -> Path:
    """Where a swarm run by hand against a discovered stack records: a run directory of its own."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return (Path(runs_root) / f"swarm-{stamp}-{os.getpid()}" / HISTORIES_DIR).resolve()


def load_environment(info: StackInfo, *, seed: int, history_dir: Path | None = None) -> dict[str, str]:
    """The variables above for a load process aimed at a running stack.

    The runner sets them for Locust; `harness status --env` prints them for a user
    who runs `locust -f` by hand (without a history directory: nothing recorded).
    HARNESS_ROOT is empty: every value is given, no other stack is read.
    """
    values = {
        ENV_ROOT: "",
        ENV_REDIS_URL: info.redis_url,
        ENV_STREAM: info.stream or DEFAULT_STREAM,
        ENV_TOXIPROXY_URL: info.toxiproxy_url,
        ENV_APP_WEBHOOK_SECRET: info.webhook_secret,
        ENV_SEED: str(seed),
        ENV_FRESH_CONNECTIONS: "1",
        ENV_REQUEST_TIMEOUT: "2",
        ENV_SKUS: DEFAULT_SKUS,
    }
    if history_dir is not None:
        values[ENV_HISTORY_DIR] = str(Path(history_dir).resolve())
    return values


def _number(name: str, raw: object, default: float) -> float:
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return default
    if isinstance(raw, bool):
        raise LoadConfigError(f"--{name.replace('_', '-')}: expected a number, got {raw!r}")
    try:
        return float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise LoadConfigError(f"--{name.replace('_', '-')}: expected a number, got {raw!r}") from None
