"""The oracles' one interface (`Oracle`), what it answers (`Effects`) and how it fails
(`OracleError`); harness.probe.oracles explains the oracles and picks one."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from harness.errors import HarnessError

Scalar = str | int | float | bool | None


class OracleError(HarnessError):
    """An oracle could not answer (the query failed, the URL did not answer as configured)."""


@dataclass(frozen=True)
class Effects:
    """What an oracle found for one request: how many effects, and their ids when known."""

    count: int
    ids: tuple[str, ...] | None = None


class Oracle(Protocol):
    """Counts the effects of one request; `per_identity` when it sees only the asking identity's."""

    per_identity: bool

    def count(self, params: Mapping[str, Scalar], headers: Mapping[str, str]) -> Effects: ...

    def close(self) -> None: ...
