"""What every endpoint's handler gets and the list answers they share.

A handler (harness.provider.routes, harness.provider.resources) is `prepare(Call) -> Run`:
`Call` is the ledger, the decoded parameters, the path's ids and the request; `Run` the
step that changes the ledger and returns the answer's JSON. `Page` is Stripe's cursor
paging (`limit`, `starting_after`, `ending_before`) over rows newest first, and
`list_answer` Stripe's list envelope.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from harness.provider.errors import invalid
from harness.provider.ledger import Ledger
from harness.provider.params import Params
from harness.provider.records import RequestInfo

Run = Callable[[], dict[str, Any]]
T = TypeVar("T")


@dataclass(frozen=True)
class Call:
    ledger: Ledger
    params: dict[str, Any]
    path_args: tuple[str, ...]
    request: RequestInfo


@dataclass(frozen=True)
class Page:
    limit: int
    starting_after: str | None
    ending_before: str | None

    def cut(self, rows: Sequence[T], ids: Sequence[str]) -> tuple[list[T], bool]:
        """Newest first (the order given); Stripe's cursor paging by object id (`ids`, one per row)."""
        if self.starting_after is not None:
            if self.starting_after not in ids:
                raise invalid(f"No such object: '{self.starting_after}'", param="starting_after",
                              code="resource_missing")
            start = ids.index(self.starting_after) + 1
            return list(rows[start:start + self.limit]), len(rows) > start + self.limit
        if self.ending_before is not None:
            if self.ending_before not in ids:
                raise invalid(f"No such object: '{self.ending_before}'", param="ending_before",
                              code="resource_missing")
            end = ids.index(self.ending_before)
            return list(rows[max(0, end - self.limit):end]), end - self.limit > 0
        return list(rows[:self.limit]), len(rows) > self.limit


def paging(params: Params) -> Page:
    return Page(params.limit(), params.string("starting_after"), params.string("ending_before"))


def list_expand(params: Params, allowed: Iterable[str]) -> frozenset[str]:
    """A list's `expand[]=data.x`: the names `x` to expand in every row."""
    expanded = params.expand(tuple(f"data.{name}" for name in allowed))
    return frozenset(name.removeprefix("data.") for name in expanded)


def list_answer(url: str, data: list[dict[str, Any]], more: bool) -> dict[str, Any]:
    return {"object": "list", "url": url, "has_more": more, "data": data}
