"""The server's command-line options, shared by `harness provider serve` and
`python -m harness.provider`.

| option | meaning |
|---|---|
| `--host` | address to listen on (default 127.0.0.1) |
| `--port` | port, 0 for any free one (default 12111, stripe-mock's) |
| `--seed N` | seed of ids and fault draws (default 0) |
| `--ledger PATH` | write the ledger (NDJSON) there when the server stops |
| `--api-key KEY` | accept only these secret keys (repeatable; default any `sk_test_...`) |
| `--idempotency-ttl DURATION` | how long a key's answer is replayed (default 24h) |
| `--webhook URL` / `--webhook-secret S` | an endpoint and its signing secret (repeatable, in pairs) |
| `--webhook-retries N` / `--webhook-retry-delay DURATION` | the retry schedule (exponential) |
| `--webhook-kinds K,K` | the delivery kinds every endpoint gets (default `first`: in order, retries only; also `concurrent_copy`, `late_duplicate`, `out_of_order`) |

`config_from_arguments` turns what argparse parsed into a `ProviderConfig`; every
inconsistency is a `ProviderError` in one line.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.durations import parse_duration
from harness.provider.errors import ProviderError
from harness.provider.outbox import OUTBOX_KINDS, Endpoint, check_kinds
from harness.provider.server import DEFAULT_PORT, ProviderConfig
from harness.webhooks.sender import RetrySchedule


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port {value} is out of range 0-65535")
    return value


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(" ".join(str(error).split())) from None


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def _kinds(text: str) -> tuple[str, ...]:
    try:
        return check_kinds([kind.strip() for kind in text.split(",") if kind.strip()])
    except ProviderError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options; their values land in `provider_*` attributes."""
    parser.add_argument("--host", dest="provider_host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", dest="provider_port", type=_port, default=DEFAULT_PORT,
                        help="port, 0 for any free one")
    parser.add_argument("--seed", dest="provider_seed", type=int, default=0, help="seed of ids and fault draws")
    parser.add_argument("--ledger", dest="provider_ledger", type=Path, metavar="PATH",
                        help="write the ledger (NDJSON) there when the server stops")
    parser.add_argument("--api-key", dest="provider_api_keys", action="append", default=[], metavar="KEY",
                        help="accept only this secret key (repeatable; default: any sk_test_...)")
    parser.add_argument("--idempotency-ttl", dest="provider_idempotency_ttl", type=_duration,
                        default=24 * 3600.0, metavar="DURATION", help="how long a key's answer is replayed")
    parser.add_argument("--webhook", dest="provider_webhooks", action="append", default=[], metavar="URL",
                        help="send every event to this endpoint (repeatable; one --webhook-secret each)")
    parser.add_argument("--webhook-secret", dest="provider_webhook_secrets", action="append", default=[],
                        metavar="SECRET", help="the signing secret (whsec_...) of the --webhook at the same place")
    parser.add_argument("--webhook-retries", dest="provider_webhook_retries", type=_count, default=3,
                        metavar="N", help="retries of a delivery not answered 2xx")
    parser.add_argument("--webhook-retry-delay", dest="provider_webhook_retry_delay", type=_duration,
                        default=0.5, metavar="DURATION", help="the first retry's wait (doubling after)")
    parser.add_argument("--webhook-kinds", dest="provider_webhook_kinds", type=_kinds, default=("first",),
                        metavar="K,K", help=f"delivery kinds of every endpoint, among {', '.join(OUTBOX_KINDS)}")


def config_from_arguments(args: argparse.Namespace) -> ProviderConfig:
    urls, secrets = args.provider_webhooks, args.provider_webhook_secrets
    if len(urls) != len(secrets):
        raise ProviderError(f"provider serve: {len(urls)} --webhook but {len(secrets)} --webhook-secret; "
                            "give one secret per endpoint, in the same order")
    keys = frozenset(args.provider_api_keys)
    for key in keys:
        if not key.startswith(("sk_test_", "rk_test_")):
            raise ProviderError(f"provider serve: --api-key must be a test key (sk_test_...), not {key[:8]}...")
    if args.provider_idempotency_ttl <= 0:
        raise ProviderError("provider serve: --idempotency-ttl must be longer than 0s")
    return ProviderConfig(
        host=args.provider_host, port=args.provider_port, seed=args.provider_seed,
        idempotency_ttl=args.provider_idempotency_ttl, api_keys=keys,
        webhooks=tuple(Endpoint(url, secret, kinds=args.provider_webhook_kinds)
                       for url, secret in zip(urls, secrets, strict=True)),
        webhook_schedule=RetrySchedule.exponential(args.provider_webhook_retry_delay,
                                                   retries=args.provider_webhook_retries),
        ledger_path=args.provider_ledger)
