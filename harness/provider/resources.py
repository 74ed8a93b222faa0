"""The endpoints a Stripe integration touches on the way to a payment, beside the ledger's
money-moving ones: the account, Customers, Checkout Sessions, Balance Transactions, and
any object adopted from a webhook event.

These objects move no money, so they are JSON objects in the ledger's store
(harness.provider.store) rather than typed records: created, retrieved, updated, listed
and deleted as Stripe does, in Stripe's shapes, without events. `retrieve_adopted` is the
last route of the table: `GET /v1/<collection>/<id>` for a collection the store holds
objects of (an `invoice` a webhook event named is at `/v1/invoices/<id>`); an id it does not
hold is Stripe's 404 `resource_missing`, a collection it holds nothing of is "Unrecognized
request URL", as for any other unknown path.
"""

from __future__ import annotations

from typing import Any

from harness.provider.calls import Call, Run, list_answer, paging
from harness.provider.errors import ApiError, invalid, missing
from harness.provider.params import Params

_IGNORED_CUSTOMER = ("address", "shipping", "invoice_settings", "payment_method", "preferred_locales",
                     "tax_exempt", "tax_id_data", "test_clock", "source", "balance", "cash_balance", "coupon",
                     "promotion_code", "invoice_prefix", "next_invoice_sequence", "tax", "validate")
_IGNORED_SESSION = ("payment_method_types", "payment_intent_data", "ui_mode", "expires_at", "locale",
                    "billing_address_collection", "shipping_address_collection", "allow_promotion_codes",
                    "automatic_tax", "customer_creation", "submit_type", "phone_number_collection",
                    "consent_collection", "custom_fields", "custom_text", "discounts", "invoice_creation",
                    "payment_method_options", "return_url", "redirect_on_completion", "subscription_data",
                    "tax_id_collection", "saved_payment_method_options", "customer_update")
SESSION_MODES = ("payment", "setup", "subscription")


# --- the account --------------------------------------------------------------------------

def account_json(call: Call) -> dict[str, Any]:
    ident = call.ledger.account_id
    return {"id": ident, "object": "account", "business_profile": {"name": "Harness test account", "url": None,
                                                                    "support_email": None, "mcc": None},
            "business_type": "company", "capabilities": {"card_payments": "active", "transfers": "active"},
            "charges_enabled": True, "country": "US", "created": 0, "default_currency": "usd",
            "details_submitted": True, "email": None, "livemode": False, "metadata": {}, "payouts_enabled": True,
            "settings": {"dashboard": {"display_name": "Harness test account", "timezone": "Etc/UTC"},
                         "payments": {"statement_descriptor": "HARNESS"}},
            "type": "standard"}


def retrieve_account(call: Call) -> Run:
    Params(call.params).finish()
    if call.path_args and call.path_args[0] != call.ledger.account_id:
        raise missing("account", call.path_args[0])
    return lambda: account_json(call)


# --- Customers ------------------------------------------------------------------------------

def create_customer(call: Call) -> Run:
    params = Params(call.params, ignored=_IGNORED_CUSTOMER)
    fields = {name: params.string(name) for name in ("email", "name", "description", "phone")}
    metadata = params.metadata()
    params.finish()

    def run() -> dict[str, Any]:
        ledger = call.ledger
        with ledger.lock:
            ident = ledger.new_id("cus_")
            return ledger.store.put({
                "id": ident, "object": "customer", "address": None, "balance": 0, "created": ledger.now(),
                "currency": None, "default_source": None, "delinquent": False, "discount": None,
                "invoice_prefix": ident[4:12].upper(),
                "invoice_settings": {"custom_fields": None, "default_payment_method": None, "footer": None,
                                     "rendering_options": None},
                "livemode": False, "metadata": metadata, "next_invoice_sequence": 1, "preferred_locales": [],
                "shipping": None, "tax_exempt": "none", "test_clock": None, **fields}).copy()
    return run


def retrieve_customer(call: Call) -> Run:
    params = Params(call.params)
    params.expand(())
    params.finish()
    customer = call.ledger.stored_object("customer", call.path_args[0])
    return lambda: customer


def update_customer(call: Call) -> Run:
    params = Params(call.params, ignored=_IGNORED_CUSTOMER)
    fields = {name: params.string(name) for name in ("email", "name", "description", "phone")}
    metadata = params.value("metadata")
    params.metadata()  # checks the shape; the update below keeps Stripe's unset-by-empty rule
    params.finish()
    call.ledger.stored_object("customer", call.path_args[0])

    def run() -> dict[str, Any]:
        with call.ledger.lock:
            stored = call.ledger.store.stored("customer", call.path_args[0])
            if stored is None or stored.get("deleted"):
                raise missing("customer", call.path_args[0])
            stored.update({name: value for name, value in fields.items() if value is not None})
            stored["metadata"] = merged_metadata(stored.get("metadata", {}), metadata)
            return dict(stored)
    return run


def delete_customer(call: Call) -> Run:
    Params(call.params).finish()
    call.ledger.stored_object("customer", call.path_args[0])

    def run() -> dict[str, Any]:
        with call.ledger.lock:
            gone = {"id": call.path_args[0], "object": "customer", "deleted": True}
            call.ledger.store.put(gone)
            return dict(gone)
    return run


def list_customers(call: Call) -> Run:
    params = Params(call.params, ignored=("created", "test_clock"))
    email = params.string("email")
    page = paging(params)
    params.finish()

    def run() -> dict[str, Any]:
        with call.ledger.lock:
            rows = [c for c in call.ledger.store.newest_first("customer")
                    if not c.get("deleted") and (email is None or c.get("email") == email)]
            cut, more = page.cut(rows, [str(c["id"]) for c in rows])
            return list_answer("/v1/customers", cut, more)
    return run


def merged_metadata(old: dict[str, str], update: Any) -> dict[str, str]:
    """Stripe's metadata update: given keys are set, a key given "" is unset, the rest stay."""
    merged = dict(old)
    if isinstance(update, dict):
        for key, value in update.items():
            if value == "":
                merged.pop(key, None)
            else:
                merged[key] = value
    elif update == "":
        merged = {}  # `metadata=` unsets them all
    return merged


# --- Checkout Sessions --------------------------------------------------------------------

def create_session(call: Call) -> Run:
    params = Params(call.params, ignored=_IGNORED_SESSION)
    mode = params.string("mode", required=True, choices=SESSION_MODES)
    fields = {name: params.string(name) for name in ("success_url", "cancel_url", "customer", "customer_email",
                                                      "client_reference_id")}
    currency = params.string("currency")
    metadata = params.metadata()
    items = params.value("line_items")
    params.finish()
    if fields["customer"] is not None:
        call.ledger.stored_object("customer", fields["customer"], "customer")
    total, item_currency = _line_items_total(items)
    if mode == "payment" and items is None:
        raise invalid("You must specify either `line_items` or `amount` in `payment` mode.", param="line_items",
                      code="parameter_missing")

    def run() -> dict[str, Any]:
        ledger = call.ledger
        with ledger.lock:
            ident = ledger.new_id("cs_test_")
            created = ledger.now()
            return dict(ledger.store.put({
                "id": ident, "object": "checkout.session", "amount_subtotal": total, "amount_total": total,
                "created": created, "currency": (currency or item_currency or "usd").lower(),
                "expires_at": created + 86_400, "livemode": False, "metadata": metadata, "mode": mode,
                "payment_intent": None, "payment_status": "unpaid" if mode == "payment" else "no_payment_required",
                "status": "open", "url": f"https://checkout.stripe.com/c/pay/{ident}", **fields}))
    return run


def _line_items_total(items: Any) -> tuple[int | None, str | None]:
    """The total of `line_items[i][price_data][unit_amount] x quantity`; None when priced by id."""
    if items is None:
        return None, None
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise invalid("Invalid array", param="line_items", code="parameter_invalid_array")
    total, currency = 0, None
    for index, item in enumerate(items):
        quantity = str(item.get("quantity", "1"))
        price = item.get("price_data")
        if not quantity.isdigit():
            raise invalid(f"Invalid integer: {quantity}", param=f"line_items[{index}][quantity]",
                          code="parameter_invalid_integer")
        if not isinstance(price, dict):
            return None, None  # a `price` id: the provider keeps no prices
        amount = str(price.get("unit_amount", ""))
        if not amount.isdigit():
            raise invalid(f"Invalid integer: {amount}", param=f"line_items[{index}][price_data][unit_amount]",
                          code="parameter_invalid_integer")
        total += int(amount) * int(quantity)
        currency = currency or (str(price["currency"]) if "currency" in price else None)
    return total, currency


def retrieve_session(call: Call) -> Run:
    params = Params(call.params)
    params.expand(())
    params.finish()
    session = call.ledger.stored_object("checkout.session", call.path_args[0], "session")
    return lambda: session


def expire_session(call: Call) -> Run:
    Params(call.params).finish()
    call.ledger.stored_object("checkout.session", call.path_args[0], "session")

    def run() -> dict[str, Any]:
        with call.ledger.lock:
            stored = call.ledger.store.stored("checkout.session", call.path_args[0])
            assert stored is not None
            if stored["status"] != "open":
                raise invalid(f"Only Checkout Sessions with a status in [\"open\"] can be expired. This Checkout "
                              f"Session has a status of \"{stored['status']}\".", stored=True)
            stored["status"] = "expired"
            return dict(stored)
    return run


def list_sessions(call: Call) -> Run:
    params = Params(call.params, ignored=("created", "customer_details", "status"))
    intent = params.string("payment_intent")
    customer = params.string("customer")
    page = paging(params)
    params.finish()

    def run() -> dict[str, Any]:
        with call.ledger.lock:
            rows = [s for s in call.ledger.store.newest_first("checkout.session")
                    if (intent is None or s.get("payment_intent") == intent)
                    and (customer is None or s.get("customer") == customer)]
            cut, more = page.cut(rows, [str(s["id"]) for s in rows])
            return list_answer("/v1/checkout/sessions", cut, more)
    return run


# --- Balance Transactions -------------------------------------------------------------------

def retrieve_balance_transaction(call: Call) -> Run:
    params = Params(call.params)
    expand = params.expand(("source",))
    params.finish()
    found = call.ledger.stored_object("balance_transaction", call.path_args[0])
    return lambda: call.ledger.expanded(found, expand)


def list_balance_transactions(call: Call) -> Run:
    params = Params(call.params, ignored=("created", "payout", "currency"))
    source = params.string("source")
    kind = params.string("type")
    page = paging(params)
    params.finish()

    def run() -> dict[str, Any]:
        with call.ledger.lock:
            rows = [t for t in call.ledger.store.newest_first("balance_transaction")
                    if (source is None or t.get("source") == source) and (kind is None or t.get("type") == kind)]
            cut, more = page.cut(rows, [str(t["id"]) for t in rows])
            return list_answer("/v1/balance_transactions", cut, more)
    return run


# --- objects adopted from webhook events ----------------------------------------------------

def retrieve_adopted(call: Call) -> Run:
    collection, ident = call.path_args
    with call.ledger.lock:
        object_type = call.ledger.store.collection_type(collection)
    if object_type is None:
        raise unrecognized("GET", f"/v1/{collection}/{ident}")
    params = Params(call.params)
    wanted = params.raw.get("expand")
    expand = params.expand(tuple(wanted) if isinstance(wanted, list) else (wanted,) if isinstance(wanted, str)
                           else ())  # any field: the object is someone else's, it may hold ids
    params.finish()
    found = call.ledger.stored_object(object_type, ident)
    return lambda: call.ledger.expanded(found, expand)


def unrecognized(method: str, path: str) -> ApiError:
    """Stripe's 404 for a path it has no endpoint at (no `code`, unlike an unknown id)."""
    return ApiError(404, "invalid_request_error", f"Unrecognized request URL ({method}: {path}).", stored=False)
