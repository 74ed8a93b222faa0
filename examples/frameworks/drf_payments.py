"""A minimal payments API in Django REST Framework, written the way DRF's docs teach,
with an Idempotency-Key layer in two modes: a correct one and its buggy
check-then-act twin. One file: the settings are configured here, no project folder.

    pip install -e '.[frameworks]'
    python examples/frameworks/drf_payments.py --mode correct --port 8093
    harness probe --config examples/frameworks/payments.yaml --upstream 127.0.0.1:8093

POST /payments {"amount_cents": int, "currency": str, "reference": str} (a Serializer
checks it) with the required header `Idempotency-Key`: without it, or with a key
reused with another payload, the view raises DRF's `ValidationError`, which DRF
answers 400 with its JSON (`{"Idempotency-Key": [...]}`, not problem details), where
the IETF draft SHOULDs 422 for the reuse. 201 with the payment; GET /payments/<id>
reads one back, GET /payments?idempotency_key=K lists those created under a key.
Served by Werkzeug's threaded server (Django's WSGI handler): the state in memory.

correct: one claim per key, taken under a lock before the charge; a concurrent
duplicate waits for the first request's answer and gets it.

check-then-act: look the key up and, if it is unknown, charge (the provider call,
`--work-ms`), then store the answer; two requests with one key that arrive within the
charge both miss the lookup and both charge: two payments for one key.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import django
from django.conf import settings

MODES = ("correct", "check-then-act")
WAIT_FOR_FIRST = 10.0  # seconds a concurrent duplicate waits for the first answer


@dataclass
class Claim:
    """One key's request: its payload's fingerprint, and its answer once it is done."""

    fingerprint: str
    done: threading.Event = field(default_factory=threading.Event)
    answer: dict[str, Any] | None = None


@dataclass
class Payments:
    """The service's state and its Idempotency-Key layer (one process, many threads)."""

    mode: str
    work_ms: int
    payments: dict[str, dict[str, Any]] = field(default_factory=dict)
    claims: dict[str, Claim] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def create(self, key: str, payment: dict[str, Any]) -> dict[str, Any] | str:
        """The created (or stored) payment, or why the request is refused: 'mismatch', 'retry'."""
        fingerprint = json.dumps(payment, sort_keys=True)
        with self.lock:
            claim = self.claims.get(key)  # the check; in `correct`, the claim with it
            first = claim is None
            if claim is None and self.mode == "correct":
                claim = self.claims[key] = Claim(fingerprint)
        if claim is not None and not first:
            if claim.fingerprint != fingerprint:
                return "mismatch"
            if not claim.done.wait(WAIT_FOR_FIRST) or claim.answer is None:
                return "retry"
            return claim.answer
        try:
            time.sleep(self.work_ms / 1000.0)  # the payment provider's call (check-then-act: the act)
        except BaseException:
            if claim is not None:
                with self.lock:  # nothing was charged: free the key for the retry
                    self.claims.pop(key, None)
                claim.done.set()
            raise
        created = {"id": f"pay_{uuid.uuid4().hex[:16]}", "idempotency_key": key, **payment}
        with self.lock:
            self.payments[created["id"]] = created
            stored = self.claims.setdefault(key, Claim(fingerprint)) if claim is None else claim
            if stored.answer is None:
                stored.answer = created
        stored.done.set()
        return created


def build_app(mode: str, work_ms: int) -> Any:
    """Django configured in this process, DRF's views on the state, the WSGI app."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    urls = ModuleType("payments_urls")  # the URLconf: Django reads its `urlpatterns`
    settings.configure(
        DEBUG=False, SECRET_KEY="example-only", ALLOWED_HOSTS=["*"], ROOT_URLCONF=urls,
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "rest_framework"],
        DATABASES={}, MIDDLEWARE=[], USE_TZ=True,
        REST_FRAMEWORK={"DEFAULT_AUTHENTICATION_CLASSES": [], "DEFAULT_PERMISSION_CLASSES": [],
                        "UNAUTHENTICATED_USER": None, "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"]},
    )
    django.setup()
    from django.core.handlers.wsgi import WSGIHandler
    from django.urls import path
    from rest_framework import serializers, status
    from rest_framework.exceptions import APIException, NotFound, ValidationError
    from rest_framework.request import Request
    from rest_framework.response import Response
    from rest_framework.views import APIView

    state = Payments(mode, work_ms)

    class PaymentSerializer(serializers.Serializer[dict[str, Any]]):
        amount_cents = serializers.IntegerField(min_value=1)
        currency = serializers.CharField()
        reference = serializers.CharField()

    class InProgress(APIException):
        status_code = status.HTTP_409_CONFLICT
        default_detail = "a request with this key is in progress or failed; retry"

    class PaymentList(APIView):
        def post(self, request: Request) -> Response:
            key = request.headers.get("Idempotency-Key")
            if not key:
                raise ValidationError({"Idempotency-Key": ["This header is required."]})
            serializer = PaymentSerializer(data=request.data)
            serializer.is_valid(raise_exception=True)
            outcome = state.create(key, dict(serializer.validated_data))
            if outcome == "mismatch":
                raise ValidationError({"Idempotency-Key": ["This key was used with another payload."]})
            if outcome == "retry":
                raise InProgress()
            return Response(outcome, status=status.HTTP_201_CREATED)

        def get(self, request: Request) -> Response:
            key = request.query_params.get("idempotency_key", "")
            with state.lock:
                found = [{"id": p["id"]} for p in state.payments.values() if p["idempotency_key"] == key]
            return Response({"items": found})

    class PaymentDetail(APIView):
        def get(self, request: Request, payment_id: str) -> Response:
            if payment_id not in state.payments:
                raise NotFound()
            return Response(state.payments[payment_id])

    class Health(APIView):
        def get(self, request: Request) -> Response:
            return Response({"status": "ok"})

    urls.urlpatterns = [path("payments", PaymentList.as_view()),
                        path("payments/<str:payment_id>", PaymentDetail.as_view()), path("healthz", Health.as_view())]
    return WSGIHandler()


def main(argv: list[str] | None = None) -> None:
    from werkzeug.serving import make_server

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=MODES, default="correct")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8093)
    parser.add_argument("--work-ms", type=int, default=30, help="how long the provider call takes")
    args = parser.parse_args(argv)
    server = make_server(args.host, args.port, build_app(args.mode, args.work_ms), threaded=True)
    print(f"drf payments ({args.mode}) on http://{args.host}:{args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
