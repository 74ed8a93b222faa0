"""How a stack is to be started: `StackSettings`, and ROOT/stack-settings.json.

`harness up` (or a run) writes the settings under the stack's root; the supervisor
reads them back, so the one process that owns the services starts them exactly as
asked. A compose stack takes the same settings (`compose`, `compose_file`). Bad
settings fail here, in the caller, with a one-line `StackError`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Final

from harness.names import DEFAULT_STACK_ROOT, ENV_APP_UNSAFE_DISABLE
from harness.stack.info import StackError

SETTINGS_FILE: Final = "stack-settings.json"
OWNERS: Final = ("up", "run", "foreground")
_PREFIX = re.compile(r"^[A-Za-z0-9_.-]{0,40}$")

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
        bad = [key for key in self.env if not key.startswith("TARGET_APP_")]
        if bad:
            raise StackError(f"only TARGET_APP_* variables go to the app, not {', '.join(sorted(bad))}")

    @property
    def unsafe_disable(self) -> tuple[str, ...]:
        """The layers this stack's app runs without, as state.json records them."""
        return unsafe_list(self.env.get(ENV_APP_UNSAFE_DISABLE, ""))


def target_app_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The TARGET_APP_* part of an environment (what `harness up` passes on)."""
    return {key: value for key, value in environ.items() if key.startswith("TARGET_APP_")}


def unsafe_list(raw: str) -> tuple[str, ...]:
    """TARGET_APP_UNSAFE_DISABLE ("api, domain") as state.json records it: sorted, unique."""
    return tuple(sorted({part.strip() for part in raw.split(",") if part.strip()}))


def write_settings(settings: StackSettings) -> None:
    data = asdict(settings)
    data["root"] = str(settings.root)
    data["env"] = dict(settings.env)
    data["compose_file"] = str(settings.compose_file) if settings.compose_file else None
    (settings.root / SETTINGS_FILE).write_text(json.dumps(data, indent=2) + "\n")


def read_settings(root: Path) -> StackSettings:
    path = Path(root) / SETTINGS_FILE
    try:
        data = json.loads(path.read_text())
        data["root"] = Path(data["root"])
        data["compose_file"] = Path(data["compose_file"]) if data.get("compose_file") else None
        return StackSettings(**data)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise StackError(f"unreadable stack settings {path}: {error}") from error
