"""The provider's control surface from the outside: `ProviderControl(url, api_key)`.

What the probe (or a person's script) uses when the provider runs in another process
(`harness provider serve`): add, list and clear faults (`/_harness/faults`) and read
the ledger (`/_harness/ledger`) as typed records. Every failure (unreachable, refused,
a bad answer) is a `ProviderError` naming the request.
"""

from __future__ import annotations

from typing import Any

import requests

from harness.provider.errors import ProviderError
from harness.provider.faults import FaultRule
from harness.provider.records import LedgerRecord, parse_ledger


class ProviderControl:
    def __init__(self, url: str, api_key: str, *, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._session = requests.Session()
        self._session.headers["Authorization"] = f"Bearer {api_key}"

    def add_fault(self, rule: FaultRule) -> None:
        self._call("POST", "/_harness/faults", json=rule.to_json())

    def faults(self) -> list[tuple[FaultRule, int]]:
        """The rules in force, each with how many requests it has hit."""
        answer = self._call("GET", "/_harness/faults").json()
        return [(FaultRule.from_json({k: v for k, v in item.items() if k != "hits"}), int(item["hits"]))
                for item in answer["faults"]]

    def remove_fault(self, rule: FaultRule) -> int:
        """Take out one rule in force and return how many requests it hit, counted up to its
        removal (ProviderError when it is not in force)."""
        answer = self._call("DELETE", "/_harness/faults", json=rule.to_json()).json()
        return int(answer["removed"]["hits"])

    def clear_faults(self) -> None:
        self._call("DELETE", "/_harness/faults")

    def ledger(self) -> list[LedgerRecord]:
        return parse_ledger(self._call("GET", "/_harness/ledger").text, where=f"{self.url}/_harness/ledger")

    def close(self) -> None:
        self._session.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        try:
            answer = self._session.request(method, self.url + path, timeout=self.timeout, **kwargs)
        except requests.RequestException as error:
            raise ProviderError(f"{method} {self.url}{path}: {type(error).__name__}") from None
        if answer.status_code != 200:
            detail = answer.text[:200].strip()
            raise ProviderError(f"{method} {self.url}{path}: {answer.status_code} {detail}")
        return answer
