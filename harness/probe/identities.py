"""Several client identities: who sent a request, whose resource it is, and the check
that no identity is given what another created (`identities_isolated`).

`identities:` in the config is a list of header maps (`[{Authorization: Bearer alice},
{Authorization: Bearer bob}]`, or tenant headers). Identity `i` is the i-th map; every
request a Locust user sends carries its identity's headers on top of the config's and
the endpoint's, and its history records `identity: i`. The load reuses one key from two
identities on purpose (`other_identity`, one after the other, and
`other_identity_concurrent`, at the same time as the owner's request), and after the
load each acknowledged resource is read back as its owner and as another identity.

The rule judged here (the draft's Security Considerations: the cache key of a stored
answer includes the client's identity): no 2xx answer, replay or read-back gives one
identity a resource another identity's 2xx answer named. The owner of a resource is the
identity whose 2xx answer named it first; a resource two identities' answers named is a
leak whoever created it, and a 2xx read of it by another identity is one too.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from harness.probe.config import Endpoint, ProbeConfig

OTHER_IDENTITY_KINDS = ("other_identity", "other_identity_concurrent")
READ_AS_OTHER = "by_id_other"  # the final read of a resource as an identity that is not its owner


class _Result(Protocol):
    checked: int

    def violate(self, message: str, **evidence: Any) -> None: ...


def request_headers(config: ProbeConfig, endpoint: Endpoint, identity: int | None) -> dict[str, str]:
    """The headers one identity sends to one endpoint (identity None: the config's own)."""
    headers = {**config.headers, **endpoint.headers}
    if identity is not None and config.identities:
        headers.update(config.identities[identity])
    return headers


def other_identity(config: ProbeConfig, identity: int | None) -> int | None:
    """Another identity than `identity` (the next one round the list), None without identities."""
    if len(config.identities) < 2:
        return None
    return ((identity or 0) + 1) % len(config.identities)


def owners(operations: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], int | None]:
    """(endpoint, resource id) → the identity whose 2xx answer named it first."""
    found: dict[tuple[str, str], tuple[float, int | None]] = {}
    for op in operations:
        if op.get("type") != "ok" or op.get("resource_id") is None:
            continue
        where = (str(op.get("endpoint")), str(op["resource_id"]))
        at = float(op.get("complete_time") or op.get("invoke_time") or 0.0)
        if where not in found or at < found[where][0]:
            found[where] = (at, op.get("identity"))
    return {where: identity for where, (_, identity) in found.items()}


def check_isolation(operations: Sequence[Mapping[str, Any]], reads: Sequence[Mapping[str, Any]],
                    result: _Result, evidence: Any) -> None:
    """`identities_isolated` over the answers and the final reads (see the module docstring)."""
    named: dict[tuple[str, str], dict[int | None, list[Mapping[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for op in operations:
        if op.get("type") == "ok" and op.get("resource_id") is not None:
            named[(str(op.get("endpoint")), str(op["resource_id"]))][op.get("identity")].append(op)
    cross = [op for op in operations if op.get("expect") in OTHER_IDENTITY_KINDS and op.get("type") != "info"]
    result.checked += len(cross)
    for (endpoint, resource_id), by_identity in named.items():
        if len(by_identity) < 2:
            continue
        who = sorted(by_identity, key=lambda identity: -1 if identity is None else identity)
        answers = [evidence(op) for identity in who for op in by_identity[identity][:2]]
        result.violate(f"{endpoint}: resource {resource_id!r} was given to identities "
                       f"{', '.join(str(i) for i in who)} (one identity got what another created)",
                       resource_id=resource_id, identities=who, answers=answers[:6])
    for read in reads:
        if read.get("read") != READ_AS_OTHER or read.get("type") == "info":
            continue
        result.checked += 1
        if read.get("type") == "ok":
            result.violate(f"{read.get('endpoint')}: identity {read.get('identity')} read resource "
                           f"{read.get('resource_id')!r} of identity {read.get('owner')} with {read.get('status')}",
                           read=dict(read))
