"""What a load process reads from its environment (table in docs/internals.md).

The runner sets these for every Locust process; a user running `locust -f` by hand
gets them from `harness status --env` or sets them. The target host comes from
Locust's own `--host`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


class LoadConfigError(ValueError):
    """An environment variable of the load process has a value that cannot be used."""


@dataclass(frozen=True)
class LoadSettings:
    history_dir: Path | None = None
    redis_url: str | None = None
    stream: str = "payments"
    webhook_secret: str = "dev-webhook-secret"
    seed: int = 0
    fresh_connections: bool = True
    request_timeout: float = 2.0
    skus: tuple[str, ...] = ("sku-1",)
    toxiproxy_url: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> LoadSettings:
        env = os.environ if environ is None else environ
        history = env.get("HARNESS_HISTORY_DIR", "").strip()
        skus = tuple(s.strip() for s in env.get("HARNESS_SKUS", "sku-1").split(",") if s.strip())
        if not skus:
            raise LoadConfigError("HARNESS_SKUS: expected a comma list of SKUs")
        fresh = env.get("HARNESS_FRESH_CONNECTIONS", "1").strip().lower()
        if fresh not in ("0", "1", "true", "false", "yes", "no", ""):
            raise LoadConfigError(f"HARNESS_FRESH_CONNECTIONS: expected 0 or 1, got {fresh!r}")
        timeout = _number(env, "HARNESS_REQUEST_TIMEOUT", 2.0)
        if timeout <= 0:
            raise LoadConfigError("HARNESS_REQUEST_TIMEOUT must be > 0")
        return cls(
            history_dir=Path(history) if history else None,
            redis_url=env.get("HARNESS_REDIS_URL", "").strip() or None,
            stream=env.get("HARNESS_STREAM", "").strip() or "payments",
            webhook_secret=env.get("TARGET_APP_WEBHOOK_SECRET", "") or "dev-webhook-secret",
            seed=int(_number(env, "HARNESS_SEED", 0)),
            fresh_connections=fresh in ("1", "true", "yes", ""),
            request_timeout=timeout,
            skus=skus,
            toxiproxy_url=env.get("HARNESS_TOXIPROXY_URL", "").strip() or None,
        )


def load_environment(state: Mapping[str, object], *, seed: int,
                     history_dir: Path | None = None) -> dict[str, str]:
    """The variables above for a load process aimed at a running stack (`state.json`).

    The runner sets them for Locust; `harness status --env` prints them for a user
    who runs `locust -f` by hand (without a history directory: nothing recorded).
    """
    values = {
        "HARNESS_REDIS_URL": str(state["redis_url"]),
        "HARNESS_STREAM": str(state.get("stream") or "payments"),
        "HARNESS_TOXIPROXY_URL": str(state.get("toxiproxy_url") or ""),
        "TARGET_APP_WEBHOOK_SECRET": str(state["webhook_secret"]),
        "HARNESS_SEED": str(seed),
        "HARNESS_FRESH_CONNECTIONS": "1",
        "HARNESS_REQUEST_TIMEOUT": "2",
        "HARNESS_SKUS": "sku-1",
    }
    if history_dir is not None:
        values["HARNESS_HISTORY_DIR"] = str(Path(history_dir).resolve())
    return values


def _number(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise LoadConfigError(f"{name}: expected a number, got {raw!r}") from None
