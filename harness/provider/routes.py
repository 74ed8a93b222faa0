"""The Stripe endpoints the provider serves, each split in two: check, then run.

`ROUTES` maps (method, path pattern) to an operation name (the name faults target)
and a `prepare` function. `prepare(call)` checks the parameters and finds the objects
the path names (every failure there is a validation error, not stored for replays)
and returns the `run` step, which changes the ledger and returns the answer's JSON.
The split is what lets the idempotency layer store exactly the requests that began
executing, as Stripe does.

Endpoints: PaymentIntents (create, retrieve, list, search, confirm, capture, cancel),
Charges (retrieve, list), Refunds (create, retrieve, list), Events (retrieve, list).
Search takes the subset of Stripe's query language a payment flow needs (docs/provider.md):
clauses `metadata['key']:'value'`, `status:'succeeded'`, `currency:'eur'`, `amount:1000`
joined by `AND`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from harness.provider.cards import card_named
from harness.provider.errors import invalid
from harness.provider.ledger import Ledger
from harness.provider.params import Params
from harness.provider.records import RequestInfo

Run = Callable[[], dict[str, Any]]

# Parameters Stripe takes that the provider accepts and ignores (documented in docs/provider.md).
_IGNORED_INTENT = ("automatic_payment_methods", "customer", "receipt_email", "statement_descriptor",
                   "statement_descriptor_suffix", "setup_future_usage", "return_url", "off_session",
                   "error_on_requires_action", "use_stripe_sdk", "mandate_data", "payment_method_options",
                   "shipping", "transfer_group", "on_behalf_of", "application_fee_amount", "payment_method_types",
                   "confirmation_method")
_IGNORED_CONFIRM = ("return_url", "off_session", "error_on_requires_action", "use_stripe_sdk", "mandate_data",
                    "payment_method_options", "receipt_email", "setup_future_usage", "shipping",
                    "payment_method_types")
_IGNORED_REFUND = ("refund_application_fee", "reverse_transfer", "instructions_email")
CAPTURE_METHODS = ("automatic", "automatic_async", "manual")


@dataclass(frozen=True)
class Call:
    ledger: Ledger
    params: dict[str, Any]
    path_args: tuple[str, ...]
    request: RequestInfo


@dataclass(frozen=True)
class Route:
    method: str
    pattern: re.Pattern[str]
    operation: str
    prepare: Callable[[Call], Run]


def _card(params: Params, *, required: bool = False) -> Any:
    name = params.string("payment_method", required=required)
    if name is None:
        return None
    card = card_named(name)
    if card is None:
        raise invalid(f"No such PaymentMethod: '{name}'", param="payment_method", code="resource_missing")
    return card


# --- PaymentIntents ---------------------------------------------------------------------

def create_intent(call: Call) -> Run:
    params = Params(call.params, ignored=_IGNORED_INTENT)
    amount = params.integer("amount", required=True, minimum=1)
    currency = params.currency()
    card = _card(params)
    confirm = bool(params.boolean("confirm"))
    capture_method = params.string("capture_method", choices=CAPTURE_METHODS) or "automatic"
    metadata = params.metadata()
    description = params.string("description")
    expand = params.expand(("latest_charge",))
    params.finish()
    if confirm and card is None:
        raise invalid("You cannot confirm this PaymentIntent because it's missing a payment method. "
                      "Provide a payment_method and try again.", param="payment_method",
                      code="parameter_missing")
    assert amount is not None

    def run() -> dict[str, Any]:
        intent = call.ledger.create_intent(amount=amount, currency=currency, capture_method=capture_method,
                                           metadata=metadata, description=description, card=card,
                                           confirm=confirm, request=call.request)
        return call.ledger.intent_json(intent, expand)
    return run


def retrieve_intent(call: Call) -> Run:
    params = Params(call.params, ignored=("client_secret",))
    expand = params.expand(("latest_charge",))
    params.finish()
    intent = call.ledger.intent(call.path_args[0])
    return lambda: call.ledger.intent_json(intent, expand)


def confirm_intent(call: Call) -> Run:
    params = Params(call.params, ignored=_IGNORED_CONFIRM)
    card = _card(params)
    capture_method = params.string("capture_method", choices=CAPTURE_METHODS)
    expand = params.expand(("latest_charge",))
    params.finish()
    intent = call.ledger.intent(call.path_args[0])

    def run() -> dict[str, Any]:
        confirmed = call.ledger.confirm(intent, card, call.request, capture_method=capture_method)
        return call.ledger.intent_json(confirmed, expand)
    return run


def capture_intent(call: Call) -> Run:
    params = Params(call.params, ignored=("statement_descriptor", "statement_descriptor_suffix",
                                          "application_fee_amount", "final_capture"))
    amount = params.integer("amount_to_capture", minimum=1)
    metadata = params.metadata()
    expand = params.expand(("latest_charge",))
    params.finish()
    intent = call.ledger.intent(call.path_args[0])

    def run() -> dict[str, Any]:
        return call.ledger.intent_json(call.ledger.capture(intent, amount, call.request, metadata=metadata), expand)
    return run


def cancel_intent(call: Call) -> Run:
    params = Params(call.params)
    reason = params.string("cancellation_reason",
                           choices=("duplicate", "fraudulent", "requested_by_customer", "abandoned"))
    expand = params.expand(("latest_charge",))
    params.finish()
    intent = call.ledger.intent(call.path_args[0])
    return lambda: call.ledger.intent_json(call.ledger.cancel(intent, reason, call.request), expand)


def list_intents(call: Call) -> Run:
    params = Params(call.params, ignored=("customer", "created"))
    page = _paging(params)
    expand = _list_expand(params, ("latest_charge",))
    params.finish()

    def run() -> dict[str, Any]:
        with call.ledger.lock:
            intents = list(call.ledger.intents.values())[::-1]
            rows, more = page.cut(intents, [i.id for i in intents])
            return _list("/v1/payment_intents", [call.ledger.intent_json(i, expand) for i in rows], more)
    return run


def search_intents(call: Call) -> Run:
    params = Params(call.params)
    query = params.string("query", required=True)
    limit = params.limit()
    token = params.string("page")
    expand = _list_expand(params, ("latest_charge",))
    params.finish()
    assert query is not None
    clauses = parse_query(query)
    offset = 0
    if token is not None:
        if not re.fullmatch(r"page_\d{1,9}", token):
            raise invalid(f"Invalid page: {token}", param="page")
        offset = int(token[5:])

    def run() -> dict[str, Any]:
        with call.ledger.lock:
            found = [intent for intent in list(call.ledger.intents.values())[::-1]
                     if all(clause.matches(intent.to_api()) for clause in clauses)]
            rows = found[offset:offset + limit]
            more = len(found) > offset + limit
            return {"object": "search_result", "url": "/v1/payment_intents/search", "has_more": more,
                    "next_page": f"page_{offset + limit}" if more else None,
                    "data": [call.ledger.intent_json(intent, expand) for intent in rows]}
    return run


@dataclass(frozen=True)
class Clause:
    field: str  # "metadata" or a top-level field
    key: str | None  # the metadata key
    value: str

    def matches(self, obj: dict[str, Any]) -> bool:
        if self.field == "metadata":
            return bool(obj["metadata"].get(self.key) == self.value)
        return str(obj.get(self.field)) == self.value


_CLAUSE = re.compile(r"""^\s*(?:metadata\[(['"])(?P<key>[^'"]{1,40})\1\]|(?P<field>status|currency|amount))"""
                     r"""\s*:\s*(?:(['"])(?P<quoted>[^'"]*)\4|(?P<number>\d{1,12}))\s*$""")


def parse_query(query: str) -> list[Clause]:
    """The clauses of a search query in the supported subset; a 400 naming `query` otherwise."""
    clauses = []
    for part in re.split(r"\s+AND\s+", query.strip()):
        match = _CLAUSE.match(part)
        if match is None:
            raise invalid(f"Unsupported search query clause {part!r}: this provider supports "
                          "metadata['key']:'value', status:'...', currency:'...' and amount:N joined by AND",
                          param="query", code="parameter_invalid_string")
        value = match.group("quoted") if match.group("quoted") is not None else match.group("number")
        if match.group("key") is not None:
            clauses.append(Clause("metadata", match.group("key"), value))
        else:
            clauses.append(Clause(match.group("field"), None, value))
    return clauses


# --- Charges ------------------------------------------------------------------------------

def retrieve_charge(call: Call) -> Run:
    params = Params(call.params)
    expand = params.expand(("payment_intent",))
    params.finish()
    charge = call.ledger.charge(call.path_args[0], "id")
    return lambda: call.ledger.charge_json(charge, expand)


def list_charges(call: Call) -> Run:
    params = Params(call.params, ignored=("customer", "created"))
    intent_id = params.string("payment_intent")
    page = _paging(params)
    expand = _list_expand(params, ("payment_intent",))
    params.finish()

    def run() -> dict[str, Any]:
        with call.ledger.lock:
            charges = [c for c in list(call.ledger.charges.values())[::-1]
                       if intent_id is None or c.payment_intent == intent_id]
            rows, more = page.cut(charges, [c.id for c in charges])
            return _list("/v1/charges", [call.ledger.charge_json(c, expand) for c in rows], more)
    return run


# --- Refunds ------------------------------------------------------------------------------

def create_refund(call: Call) -> Run:
    params = Params(call.params, ignored=_IGNORED_REFUND)
    intent_id = params.string("payment_intent")
    charge_id = params.string("charge")
    amount = params.integer("amount", minimum=1)
    reason = params.string("reason", choices=("duplicate", "fraudulent", "requested_by_customer"))
    metadata = params.metadata()
    expand = params.expand(("charge", "payment_intent"))
    params.finish()
    if (intent_id is None) == (charge_id is None):
        raise invalid("One of the following params should be provided for this request: payment_intent or charge.",
                      code="parameter_missing")
    if charge_id is not None:
        charge = call.ledger.charge(charge_id)
    else:
        assert intent_id is not None
        intent = call.ledger.intent(intent_id, "payment_intent")
        if intent.latest_charge is None:
            raise invalid(f"This PaymentIntent ({intent.id}) does not have a successful charge to refund.",
                          param="payment_intent", code="charge_not_refundable", stored=True)
        charge = call.ledger.charge(intent.latest_charge)

    def run() -> dict[str, Any]:
        refund = call.ledger.refund(charge, amount, reason, metadata, call.request)
        return call.ledger.refund_json(refund, expand)
    return run


def retrieve_refund(call: Call) -> Run:
    params = Params(call.params)
    expand = params.expand(("charge", "payment_intent"))
    params.finish()
    refund = call.ledger.refund_named(call.path_args[0])
    return lambda: call.ledger.refund_json(refund, expand)


def list_refunds(call: Call) -> Run:
    params = Params(call.params, ignored=("created",))
    intent_id = params.string("payment_intent")
    charge_id = params.string("charge")
    page = _paging(params)
    params.finish()

    def run() -> dict[str, Any]:
        with call.ledger.lock:
            refunds = [r for r in list(call.ledger.refunds.values())[::-1]
                       if (intent_id is None or r.payment_intent == intent_id)
                       and (charge_id is None or r.charge == charge_id)]
            rows, more = page.cut(refunds, [r.id for r in refunds])
            return _list("/v1/refunds", [call.ledger.refund_json(r) for r in rows], more)
    return run


# --- Events -------------------------------------------------------------------------------

def retrieve_event(call: Call) -> Run:
    Params(call.params).finish()
    stored = call.ledger.event(call.path_args[0])
    return lambda: dict(stored.event.data())


def list_events(call: Call) -> Run:
    params = Params(call.params, ignored=("created", "delivery_success"))
    single = params.string("type")
    many = params.value("types")
    page = _paging(params)
    params.finish()
    wanted: set[str] | None = None
    if single is not None:
        wanted = {single}
    if many is not None:
        if not isinstance(many, list) or not all(isinstance(t, str) for t in many):
            raise invalid("types must be a list of event types", param="types")
        wanted = (wanted or set()) | set(many)

    def run() -> dict[str, Any]:
        with call.ledger.lock:
            events = [e for e in call.ledger.events[::-1]
                      if wanted is None or any(_type_matches(e.event.type, t) for t in wanted)]
            rows, more = page.cut(events, [e.event.id for e in events])
            return _list("/v1/events", [e.event.data() for e in rows], more)
    return run


def _type_matches(event_type: str, wanted: str) -> bool:
    """Stripe's `type` filter takes `*` as a wildcard (`payment_intent.*`)."""
    return re.fullmatch(re.escape(wanted).replace(r"\*", ".*"), event_type) is not None


# --- lists ----------------------------------------------------------------------------------

T = TypeVar("T")


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


def _paging(params: Params) -> Page:
    return Page(params.limit(), params.string("starting_after"), params.string("ending_before"))


def _list_expand(params: Params, allowed: Iterable[str]) -> frozenset[str]:
    expanded = params.expand(tuple(f"data.{name}" for name in allowed))
    return frozenset(name.removeprefix("data.") for name in expanded)


def _list(url: str, data: list[dict[str, Any]], more: bool) -> dict[str, Any]:
    return {"object": "list", "url": url, "has_more": more, "data": data}


_ID = r"([A-Za-z0-9_]{1,255})"


def _route(method: str, path: str, operation: str, prepare: Callable[[Call], Run]) -> Route:
    return Route(method, re.compile("^" + path.replace("{id}", _ID) + "$"), operation, prepare)


ROUTES: tuple[Route, ...] = (
    _route("POST", "/v1/payment_intents", "payment_intents.create", create_intent),
    _route("GET", "/v1/payment_intents", "payment_intents.list", list_intents),
    _route("GET", "/v1/payment_intents/search", "payment_intents.search", search_intents),
    _route("GET", "/v1/payment_intents/{id}", "payment_intents.retrieve", retrieve_intent),
    _route("POST", "/v1/payment_intents/{id}/confirm", "payment_intents.confirm", confirm_intent),
    _route("POST", "/v1/payment_intents/{id}/capture", "payment_intents.capture", capture_intent),
    _route("POST", "/v1/payment_intents/{id}/cancel", "payment_intents.cancel", cancel_intent),
    _route("GET", "/v1/charges", "charges.list", list_charges),
    _route("GET", "/v1/charges/{id}", "charges.retrieve", retrieve_charge),
    _route("POST", "/v1/refunds", "refunds.create", create_refund),
    _route("GET", "/v1/refunds", "refunds.list", list_refunds),
    _route("GET", "/v1/refunds/{id}", "refunds.retrieve", retrieve_refund),
    _route("GET", "/v1/events", "events.list", list_events),
    _route("GET", "/v1/events/{id}", "events.retrieve", retrieve_event),
)
OPERATIONS = tuple(route.operation for route in ROUTES)


def find_route(method: str, path: str) -> tuple[Route, tuple[str, ...]] | None:
    for route in ROUTES:
        if route.method == method:
            match = route.pattern.match(path)
            if match:
                return route, match.groups()
    return None

