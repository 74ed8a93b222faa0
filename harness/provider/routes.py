"""The Stripe endpoints the provider serves, each split in two: check, then run.

`ROUTES` maps (method, path pattern) to an operation name (the name faults target)
and a `prepare` function. `prepare(call)` checks the parameters and finds the objects
the path names (every failure there is a validation error, not stored for replays)
and returns the `run` step, which changes the ledger and returns the answer's JSON.
The split is what lets the idempotency layer store exactly the requests that began
executing, as Stripe does.

Endpoints: PaymentIntents (create, retrieve, update, list, search, confirm, capture, cancel),
Charges (retrieve, update, list), Refunds (create, retrieve, list), Events (retrieve, list),
and those of harness.provider.resources (the account, Customers, Checkout Sessions,
Balance Transactions, objects adopted from webhook events). A retrieve answers for an
object a webhook event named (`Ledger.adopt_event_objects`) when the ledger has none of
its own by that id; `expand[]` puts objects in place of ids (`Ledger.expanded`).
Search takes the subset of Stripe's query language a payment flow needs (docs/provider.md):
clauses `metadata['key']:'value'`, `status:'succeeded'`, `currency:'eur'`, `amount:1000`
joined by `AND`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from harness.provider import resources
from harness.provider.calls import Call, Run, list_answer, list_expand, paging
from harness.provider.cards import card_named
from harness.provider.errors import invalid
from harness.provider.params import Params

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
# What `expand[]` may name on each object (dotted: through an expanded object).
INTENT_EXPAND = ("latest_charge", "latest_charge.balance_transaction")
CHARGE_EXPAND = ("balance_transaction", "payment_intent", "payment_intent.latest_charge", "refunds")
REFUND_EXPAND = ("balance_transaction", "charge", "charge.balance_transaction", "payment_intent")


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
    expand = params.expand(INTENT_EXPAND)
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
    expand = params.expand(INTENT_EXPAND)
    params.finish()
    adopted = _adopted(call, "payment_intent", call.ledger.intents)
    if adopted is not None:
        return lambda: call.ledger.expanded(adopted, expand)
    intent = call.ledger.intent(call.path_args[0])
    return lambda: call.ledger.intent_json(intent, expand)


def update_intent(call: Call) -> Run:
    params = Params(call.params, ignored=_IGNORED_INTENT)
    description = params.string("description")
    metadata = params.value("metadata")
    params.metadata()  # the shape; merged below with Stripe's unset-by-empty rule
    expand = params.expand(INTENT_EXPAND)
    params.finish()
    intent = call.ledger.intent(call.path_args[0])

    def run() -> dict[str, Any]:
        with call.ledger.lock:
            intent.metadata = resources.merged_metadata(intent.metadata, metadata)
            if description is not None:
                intent.description = description
            return call.ledger.intent_json(intent, expand)
    return run


def _adopted(call: Call, object_type: str, native: Mapping[str, object]) -> dict[str, Any] | None:
    """The object a webhook event named (harness.provider.store), when the ledger has none of its own."""
    ident = call.path_args[0]
    with call.ledger.lock:
        if ident in native:
            return None
        return call.ledger.store.get(object_type, ident)


def confirm_intent(call: Call) -> Run:
    params = Params(call.params, ignored=_IGNORED_CONFIRM)
    card = _card(params)
    capture_method = params.string("capture_method", choices=CAPTURE_METHODS)
    expand = params.expand(INTENT_EXPAND)
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
    expand = params.expand(INTENT_EXPAND)
    params.finish()
    intent = call.ledger.intent(call.path_args[0])

    def run() -> dict[str, Any]:
        return call.ledger.intent_json(call.ledger.capture(intent, amount, call.request, metadata=metadata), expand)
    return run


def cancel_intent(call: Call) -> Run:
    params = Params(call.params)
    reason = params.string("cancellation_reason",
                           choices=("duplicate", "fraudulent", "requested_by_customer", "abandoned"))
    expand = params.expand(INTENT_EXPAND)
    params.finish()
    intent = call.ledger.intent(call.path_args[0])
    return lambda: call.ledger.intent_json(call.ledger.cancel(intent, reason, call.request), expand)


def list_intents(call: Call) -> Run:
    params = Params(call.params, ignored=("customer", "created"))
    page = paging(params)
    expand = list_expand(params, INTENT_EXPAND)
    params.finish()

    def run() -> dict[str, Any]:
        with call.ledger.lock:
            intents = list(call.ledger.intents.values())[::-1]
            rows, more = page.cut(intents, [i.id for i in intents])
            return list_answer("/v1/payment_intents", [call.ledger.intent_json(i, expand) for i in rows], more)
    return run


def search_intents(call: Call) -> Run:
    params = Params(call.params)
    query = params.string("query", required=True)
    limit = params.limit()
    token = params.string("page")
    expand = list_expand(params, INTENT_EXPAND)
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
    expand = params.expand(CHARGE_EXPAND)
    params.finish()
    adopted = _adopted(call, "charge", call.ledger.charges)
    if adopted is not None:
        return lambda: call.ledger.expanded(adopted, expand)
    charge = call.ledger.charge(call.path_args[0], "id")
    return lambda: call.ledger.charge_json(charge, expand)


def update_charge(call: Call) -> Run:
    params = Params(call.params, ignored=("fraud_details", "receipt_email", "shipping", "transfer_group",
                                          "customer"))
    description = params.string("description")
    metadata = params.value("metadata")
    params.metadata()
    expand = params.expand(CHARGE_EXPAND)
    params.finish()
    charge = call.ledger.charge(call.path_args[0], "id")

    def run() -> dict[str, Any]:
        with call.ledger.lock:
            charge.metadata = resources.merged_metadata(charge.metadata, metadata)
            if description is not None:
                charge.description = description
            return call.ledger.charge_json(charge, expand)
    return run


def list_charges(call: Call) -> Run:
    params = Params(call.params, ignored=("customer", "created"))
    intent_id = params.string("payment_intent")
    page = paging(params)
    expand = list_expand(params, CHARGE_EXPAND)
    params.finish()

    def run() -> dict[str, Any]:
        with call.ledger.lock:
            charges = [c for c in list(call.ledger.charges.values())[::-1]
                       if intent_id is None or c.payment_intent == intent_id]
            rows, more = page.cut(charges, [c.id for c in charges])
            return list_answer("/v1/charges", [call.ledger.charge_json(c, expand) for c in rows], more)
    return run


# --- Refunds ------------------------------------------------------------------------------

def create_refund(call: Call) -> Run:
    params = Params(call.params, ignored=_IGNORED_REFUND)
    intent_id = params.string("payment_intent")
    charge_id = params.string("charge")
    amount = params.integer("amount", minimum=1)
    reason = params.string("reason", choices=("duplicate", "fraudulent", "requested_by_customer"))
    metadata = params.metadata()
    expand = params.expand(REFUND_EXPAND)
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
    expand = params.expand(REFUND_EXPAND)
    params.finish()
    adopted = _adopted(call, "refund", call.ledger.refunds)
    if adopted is not None:
        return lambda: call.ledger.expanded(adopted, expand)
    refund = call.ledger.refund_named(call.path_args[0])
    return lambda: call.ledger.refund_json(refund, expand)


def list_refunds(call: Call) -> Run:
    params = Params(call.params, ignored=("created",))
    intent_id = params.string("payment_intent")
    charge_id = params.string("charge")
    page = paging(params)
    params.finish()

    def run() -> dict[str, Any]:
        with call.ledger.lock:
            refunds = [r for r in list(call.ledger.refunds.values())[::-1]
                       if (intent_id is None or r.payment_intent == intent_id)
                       and (charge_id is None or r.charge == charge_id)]
            rows, more = page.cut(refunds, [r.id for r in refunds])
            return list_answer("/v1/refunds", [call.ledger.refund_json(r) for r in rows], more)
    return run


# --- Events -------------------------------------------------------------------------------

def retrieve_event(call: Call) -> Run:
    Params(call.params).finish()
    with call.ledger.lock:
        adopted = call.ledger.store.get("event", call.path_args[0])
    if adopted is not None:  # an event the probe made (Ledger.adopt_event_objects)
        return lambda: adopted
    stored = call.ledger.event(call.path_args[0])
    return lambda: dict(stored.event.data())


def list_events(call: Call) -> Run:
    params = Params(call.params, ignored=("created", "delivery_success"))
    single = params.string("type")
    many = params.value("types")
    page = paging(params)
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
            return list_answer("/v1/events", [e.event.data() for e in rows], more)
    return run


def _type_matches(event_type: str, wanted: str) -> bool:
    """Stripe's `type` filter takes `*` as a wildcard (`payment_intent.*`)."""
    return re.fullmatch(re.escape(wanted).replace(r"\*", ".*"), event_type) is not None


# An object id: Stripe's own are letters, digits and `_`; `-` is what `{uuid}` makes in a
# probe's webhook events, so such an id is an unknown object (404 resource_missing), not an
# unknown URL.
_ID = r"([A-Za-z0-9_\-]{1,255})"


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
    _route("POST", "/v1/payment_intents/{id}", "payment_intents.update", update_intent),
    _route("POST", "/v1/charges/{id}", "charges.update", update_charge),
    _route("GET", "/v1/account", "account.retrieve", resources.retrieve_account),
    _route("GET", "/v1/accounts/{id}", "account.retrieve", resources.retrieve_account),
    _route("POST", "/v1/customers", "customers.create", resources.create_customer),
    _route("GET", "/v1/customers", "customers.list", resources.list_customers),
    _route("GET", "/v1/customers/{id}", "customers.retrieve", resources.retrieve_customer),
    _route("POST", "/v1/customers/{id}", "customers.update", resources.update_customer),
    _route("DELETE", "/v1/customers/{id}", "customers.delete", resources.delete_customer),
    _route("POST", "/v1/checkout/sessions", "checkout.sessions.create", resources.create_session),
    _route("GET", "/v1/checkout/sessions", "checkout.sessions.list", resources.list_sessions),
    _route("GET", "/v1/checkout/sessions/{id}", "checkout.sessions.retrieve", resources.retrieve_session),
    _route("POST", "/v1/checkout/sessions/{id}/expire", "checkout.sessions.expire", resources.expire_session),
    _route("GET", "/v1/balance_transactions", "balance_transactions.list", resources.list_balance_transactions),
    _route("GET", "/v1/balance_transactions/{id}", "balance_transactions.retrieve",
           resources.retrieve_balance_transaction),
    # Last: any other collection the store holds adopted objects of (/v1/invoices/in_...).
    Route("GET", re.compile(r"^/v1/([a-z_]{1,60}(?:/[a-z_]{1,60})?)/" + _ID + "$"), "objects.retrieve",
          resources.retrieve_adopted),
)
OPERATIONS = tuple(dict.fromkeys(route.operation for route in ROUTES))


def find_route(method: str, path: str) -> tuple[Route, tuple[str, ...]] | None:
    for route in ROUTES:
        if route.method == method:
            match = route.pattern.match(path)
            if match:
                return route, match.groups()
    return None

