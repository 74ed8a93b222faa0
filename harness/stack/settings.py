"""How a stack is to be started: `StackSettings`, and ROOT/stack-settings.json.

`harness up` (or a run) writes the settings under the stack's root; the supervisor
reads them back, so the one process that owns the services starts them exactly as
asked. A compose stack takes the same settings (`compose`, `compose_file`). Bad
settings fail here, in the caller, with a one-line `StackError`.

The file never holds a secret: a webhook secret or internal token given in `env`
(`TARGET_APP_WEBHOOK_SECRET`, `TARGET_APP_INTERNAL_TOKEN`) is left out of it and
reaches the supervisor in its own environment (`secret_environment`, one variable,
`HARNESS_STACK_SECRETS`), which `read_settings` merges back. A run's own stack lives in
its run directory, and a run directory holds neither secret. The file is 0600 all the same.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Final

from harness.fieldcheck import printable
from harness.names import DEFAULT_STACK_ROOT, ENV_APP_INTERNAL_TOKEN, ENV_APP_UNSAFE_DISABLE, ENV_APP_WEBHOOK_SECRET
from harness.stack.info import StackError
from harness.stack.private_files import write_private

SETTINGS_FILE: Final = "stack-settings.json"
SECRET_ENV: Final = (ENV_APP_WEBHOOK_SECRET, ENV_APP_INTERNAL_TOKEN)  # never written to SETTINGS_FILE
SECRETS_VAR: Final = "HARNESS_STACK_SECRETS"  # the supervisor's environment only: JSON of SECRET_ENV
OWNERS: Final = ("up", "run", "foreground")
_PREFIX = re.compile(r"^[A-Za-z0-9_.-]{0,40}$")
_CONSUMER = re.compile(r"^consumer-[1-9][0-9]*$")
CLOCKS_DIR: Final = "clocks"

# What the harness gives the app unless the environment says otherwise: enough stock
# that a run measures duplicates rather than an empty shelf, and one scarce SKU so
# out-of-stock answers occur too.
DEFAULT_APP_ENV: Final[Mapping[str, str]] = {"TARGET_APP_INVENTORY": "sku-1=10000000,sku-2=5"}


@dataclass(frozen=True)
class StackSettings:
    root: Path = DEFAULT_STACK_ROOT
    app_workers: int = 4
    consumers: int = 2
    env: Mapping[str, str] = field(default_factory=dict)  # TARGET_APP_* for app and consumers
    toxiproxy_url: str | None = None
    health_timeout: float = 30.0
    compose: bool = False
    compose_file: Path | None = None
    owner: str = "up"  # up (outlives the command) | run | foreground (die with their owner)
    proxy_prefix: str = ""  # e.g. "ci-42-": proxies ci-42-app, ci-42-redis on a shared Toxiproxy
    # Services started under libfaketime (app, consumer-N): a plan moves their
    # clocks through ROOT/clocks/NAME.offset (clock_control_file; docs/clocks.md).
    fake_clocks: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.owner not in OWNERS:
            raise StackError(f"stack owner must be one of {', '.join(OWNERS)}, not {self.owner!r}")
        if not _PREFIX.match(self.proxy_prefix):
            raise StackError(f"proxy prefix must be letters, digits, '.', '_' or '-' (at most 40), "
                             f"not {self.proxy_prefix!r}")
        if self.app_workers < 1:
            raise StackError(f"app workers must be >= 1, got {self.app_workers}")
        if self.consumers < 0:
            raise StackError(f"consumers must be >= 0, got {self.consumers}")
        if not self.health_timeout > 0:
            raise StackError(f"health timeout must be > 0, got {self.health_timeout}")
        odd = [name for name in self.fake_clocks if name != "app" and not _CONSUMER.match(name)]
        if odd:
            raise StackError(f"fake clocks go to app and consumer-N only (harness.nemesis.plans.STACK_CLOCKS), "
                             f"not {', '.join(map(printable, odd))}")
        if self.fake_clocks and self.compose:
            raise StackError("fake clocks need a local stack: libfaketime is preloaded into processes the "
                             "supervisor starts, not into containers")
        bad = [key for key in self.env if not key.startswith("TARGET_APP_")]
        if bad:
            raise StackError(f"only TARGET_APP_* variables go to the app, not {', '.join(sorted(bad))}")

    @property
    def unsafe_disable(self) -> tuple[str, ...]:
        """The layers this stack's app runs without, as state.json records them."""
        return unsafe_list(self.env.get(ENV_APP_UNSAFE_DISABLE, ""))


def clock_control_file(root: Path, service: str) -> Path:
    """The libfaketime control file of a stack's service on a fake clock."""
    return Path(root) / CLOCKS_DIR / f"{service}.offset"


def target_app_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The TARGET_APP_* part of an environment (what `harness up` passes on)."""
    return {key: value for key, value in environ.items() if key.startswith("TARGET_APP_")}


def unsafe_list(raw: str) -> tuple[str, ...]:
    """TARGET_APP_UNSAFE_DISABLE ("api, domain") as state.json records it: sorted, unique."""
    return tuple(sorted({part.strip() for part in raw.split(",") if part.strip()}))


def write_settings(settings: StackSettings) -> None:
    """ROOT/stack-settings.json, without the secrets (`secret_environment` carries them)."""
    data = asdict(settings)
    data["root"] = str(settings.root)
    data["env"] = {key: value for key, value in settings.env.items() if key not in SECRET_ENV}
    data["compose_file"] = str(settings.compose_file) if settings.compose_file else None
    write_private(settings.root / SETTINGS_FILE, json.dumps(data, indent=2) + "\n")


def secret_environment(settings: StackSettings) -> dict[str, str]:
    """The variable that hands the supervisor the secrets `write_settings` leaves out."""
    given = {key: settings.env[key] for key in SECRET_ENV if settings.env.get(key)}
    return {SECRETS_VAR: json.dumps(given)} if given else {}


def read_settings(root: Path, environ: Mapping[str, str] | None = None) -> StackSettings:
    """The settings `write_settings` wrote, with the secrets of `environ` (default: this
    process's environment, i.e. the supervisor's) merged back into `env`."""
    path = Path(root) / SETTINGS_FILE
    environ = os.environ if environ is None else environ
    try:
        data = json.loads(path.read_text())
        given = json.loads(environ.get(SECRETS_VAR) or "{}")
        data["env"] = {**data["env"], **{key: str(given[key]) for key in SECRET_ENV if key in given}}
        data["root"] = Path(data["root"])
        data["compose_file"] = Path(data["compose_file"]) if data.get("compose_file") else None
        data["fake_clocks"] = tuple(data.get("fake_clocks") or ())
        return StackSettings(**data)
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as error:
        raise StackError(f"unreadable stack settings {path}: {error}") from error
