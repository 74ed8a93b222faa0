"""The provider's objects kept as their JSON: customers, checkout sessions, balance
transactions, the account, and objects adopted from webhook events.

The ledger's money-moving objects (PaymentIntents, Charges, Refunds) are typed records
with rules (harness.provider.objects); everything else a Stripe integration reads on
the way is a JSON object here, kept by its `object` type and id in the order made.
`adopt(obj)` keeps an object someone else made (a webhook event's `data.object`, the
event itself) so a receiver that fetches what it was told about gets it, not a 404.
`collection_type(path)` maps a URL collection (`invoices`, `checkout/sessions`) to the
object type it lists (`invoice`, `checkout.session`), Stripe's naming rule. The caller
(the ledger) holds its lock around every use.
"""

from __future__ import annotations

import copy
from typing import Any


def collection_of(object_type: str) -> str:
    """The URL collection of an object type: `checkout.session` -> `checkout/sessions`."""
    *namespace, name = object_type.split(".")
    plural = name[:-1] + "ies" if name.endswith("y") and not name.endswith("ay") else name + "s"
    return "/".join([*namespace, plural])


class ObjectStore:
    def __init__(self) -> None:
        self._objects: dict[str, dict[str, dict[str, Any]]] = {}  # type -> id -> JSON

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Keep (or replace) `obj` under its `object` type and `id`."""
        self._objects.setdefault(str(obj["object"]), {})[str(obj["id"])] = obj
        return obj

    def get(self, object_type: str, ident: str) -> dict[str, Any] | None:
        """A copy of the object, or None: answers never share the stored dict."""
        found = self._objects.get(object_type, {}).get(ident)
        return copy.deepcopy(found) if found is not None else None

    def find(self, ident: str) -> dict[str, Any] | None:
        """An object of any type by id (what an `expand` of an id needs)."""
        for objects in self._objects.values():
            if ident in objects:
                return copy.deepcopy(objects[ident])
        return None

    def stored(self, object_type: str, ident: str) -> dict[str, Any] | None:
        """The stored dict itself, for an update under the caller's lock."""
        return self._objects.get(object_type, {}).get(ident)

    def newest_first(self, object_type: str) -> list[dict[str, Any]]:
        return [copy.deepcopy(obj) for obj in reversed(self._objects.get(object_type, {}).values())]

    def adopt(self, obj: Any) -> bool:
        """Keep an object made elsewhere (a JSON object with a string `id` and `object`) unless
        one with that id is already kept; whether it was kept."""
        if not isinstance(obj, dict):
            return False
        ident, object_type = obj.get("id"), obj.get("object")
        if not isinstance(ident, str) or not ident or not isinstance(object_type, str) or not object_type:
            return False
        if ident in self._objects.get(object_type, {}):
            return False
        self.put(copy.deepcopy(obj))
        return True

    def collection_type(self, collection: str) -> str | None:
        """The object type kept under a URL collection (`invoices` -> `invoice`), or None."""
        for object_type in self._objects:
            if collection_of(object_type) == collection:
                return object_type
        return None
