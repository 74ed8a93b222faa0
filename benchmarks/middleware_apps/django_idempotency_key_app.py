"""`django-idempotency-key` as its README configures it: `IdempotencyKeyMiddleware` in
MIDDLEWARE (every unsafe method requires the key), default settings (memory storage,
thread lock), in a one-file Django project with a payments view that takes 30 ms
(the provider call) and a read-back view, served by Django's threaded development
server. Run by probe_middlewares.py."""

import json
import sys
import threading
import time
import uuid

from django.conf import settings

settings.configure(
    DEBUG=False, SECRET_KEY="probe", ALLOWED_HOSTS=["*"], ROOT_URLCONF=__name__,
    MIDDLEWARE=["idempotency_key.middleware.IdempotencyKeyMiddleware"], INSTALLED_APPS=[],
)

import django  # noqa: E402

django.setup()

from django.core.servers.basehttp import WSGIServer, run  # noqa: E402
from django.core.wsgi import get_wsgi_application  # noqa: E402
from django.http import HttpResponse, JsonResponse  # noqa: E402
from django.urls import path  # noqa: E402

PAYMENTS: dict[str, dict] = {}
LOCK = threading.Lock()


def payments(request):
    if request.method != "POST":
        return HttpResponse(status=405)
    body = json.loads(request.body)
    time.sleep(0.03)  # the payment provider
    record = {"id": uuid.uuid4().hex, "status": "paid", "amount": body["amount"]}
    with LOCK:  # owned by the caller: a user reads only their own payments
        PAYMENTS[record["id"]] = {**record, "owner": request.headers.get("Authorization")}
    return JsonResponse(record, status=201)


def payment(request, payment_id):
    found = PAYMENTS.get(payment_id)
    if found is None or found["owner"] != request.headers.get("Authorization"):
        return JsonResponse({"detail": "not found"}, status=404)
    return JsonResponse({name: value for name, value in found.items() if name != "owner"})


def healthz(request):
    return JsonResponse({"status": "ok"})


urlpatterns = [path("payments", payments), path("payments/<str:payment_id>", payment), path("healthz", healthz)]

if __name__ == "__main__":
    run("127.0.0.1", int(sys.argv[1]), get_wsgi_application(), threading=True, server_cls=WSGIServer)
