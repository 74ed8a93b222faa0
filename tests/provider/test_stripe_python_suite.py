"""stripe-python's own test suite, run against `harness provider` as stripe's developers run
it against stripe-mock, and held to the pass counts docs/provider.md publishes.

The suite is the sdist of the pinned SDK (scripts/setup.sh fetches it into the venv: the
wheel carries no tests). It is run in a child pytest, from the sdist's folder so that it
imports the sdist's own `stripe` and its own conftest, with `STRIPE_MOCK_HOST` /
`STRIPE_MOCK_PORT` pointing at an embedded provider on a free loopback port. Only the tests
that reach the server count: the `_service` variants of the generated examples stub their
answer in the client and would pass against anything.

docs/provider.md's table "stripe-python's suite" is the one place the numbers live: this
test reads it, and fails when a resource passes fewer of its tests than the table says
(a regression) or more (the table is stale: write the new number down).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest
import stripe

from harness.provider.server import EmbeddedProvider, ProviderConfig

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "provider.md"

# Each counted test belongs to the resource its requests go to: a file of tests/api_resources
# or the name prefix of a generated example.
FILES = {"test_charge.py": "charges", "test_customer.py": "customers",
         "test_customer_balance_transaction.py": "customers", "test_account.py": "account"}
GENERATED = (("test_payment_intents_", "payment_intents"), ("test_charges_", "charges"),
             ("test_refunds_", "refunds"), ("test_customers_", "customers"), ("test_events_", "events"),
             ("test_balance_transactions_", "balance_transactions"),
             ("test_checkout_sessions_", "checkout_sessions"), ("test_accounts_", "account"),
             ("test_account_", "account"))
SELECTION = " or ".join(prefix.removeprefix("test_").rstrip("_") for prefix, _ in GENERATED)


def suite_folder() -> Path:
    folder = Path(sys.prefix) / "share" / f"stripe-python-{stripe.VERSION}"
    if not (folder / "tests" / "conftest.py").is_file():
        pytest.fail(f"stripe-python {stripe.VERSION}'s test suite is missing at {folder}: "
                    "run ./scripts/setup.sh (it fetches the sdist from PyPI)")
    return folder


def resource_of(classname: str, name: str) -> str | None:
    module = classname.split(".")
    if "api_resources" in module:
        return FILES.get(module[-2] + ".py")
    if "test_generated_examples" in module and "_service" not in name:
        for prefix, resource in GENERATED:
            if name.startswith(prefix):
                return resource
    return None


def documented_counts() -> dict[str, tuple[int, int]]:
    """The table under the heading "stripe-python's suite": resource -> (passed, of)."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("### stripe-python's suite", 1)[1].split("\n#", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| (\d+) \| (\d+) \|", section, flags=re.MULTILINE)
    return {resource: (int(passed), int(total)) for resource, passed, total in rows}


def run_suite(tmp_path: Path) -> dict[str, tuple[int, int]]:
    folder = suite_folder()
    files = [f"tests/api_resources/{name}" for name in FILES]
    counts: dict[str, tuple[int, int]] = {}
    with EmbeddedProvider(ProviderConfig(seed=3)) as provider:
        env = {**os.environ, "STRIPE_MOCK_HOST": "127.0.0.1", "STRIPE_MOCK_PORT": str(provider.port)}
        # The resource files whole, then the generated examples by name. --tb=no: a traceback
        # through the 60,000-line generated module costs a second per failure.
        for index, args in enumerate((files, ["tests/test_generated_examples.py", "-k", SELECTION])):
            junit = tmp_path / f"part{index}.xml"
            done = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "--tb=no", "-p", "no:cacheprovider", "-n", "0",
                 f"--junitxml={junit}", *args],
                cwd=folder, env=env, capture_output=True, text=True, timeout=600, check=False)
            # 0: all passed, 1: some failed; anything else is the suite not running at all.
            assert done.returncode in (0, 1), done.stdout[-2000:] + done.stderr[-2000:]
            tally(junit, counts)
    return counts


def tally(junit: Path, counts: dict[str, tuple[int, int]]) -> None:
    for case in ElementTree.parse(junit).iter("testcase"):
        resource = resource_of(case.get("classname", ""), case.get("name", ""))
        if resource is None or any(child.tag == "skipped" for child in case):
            continue
        failed = any(child.tag in ("failure", "error") for child in case)
        passed, total = counts.get(resource, (0, 0))
        counts[resource] = (passed + (not failed), total + 1)


@pytest.mark.slow
def test_stripe_pythons_own_suite_passes_what_the_docs_say(tmp_path: Path) -> None:
    documented = documented_counts()
    assert documented, f"{DOC} has no table under \"### stripe-python's suite\""
    measured = run_suite(tmp_path)
    assert set(measured) == set(documented), (measured, documented)
    assert measured == documented, (
        "stripe-python's suite against the provider differs from docs/provider.md "
        f"(resource: (passed, of)): measured {sorted(measured.items())}, documented {sorted(documented.items())}")
