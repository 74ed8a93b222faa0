"""harness.webui.guard on a bare Flask app (no Locust in the test process: it
monkey-patches whoever imports it): each check alone, the bind rule and its warning,
and the basic auth that `--web-login` gets with the harness's locustfiles."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from flask import Flask, Response, request
from flask_login import LoginManager, login_required

from harness.errors import HarnessError
from harness.webui.guard import (
    ChaosGuard,
    Refused,
    bind_host,
    exposure_warning,
    install_basic_auth,
    is_loopback,
    origin_of,
)


def guarded_app(guard: ChaosGuard) -> tuple[Flask, list[str]]:
    """An app with one state-changing route behind `guard`; `done` lists what it did."""
    app = Flask(__name__)
    done: list[str] = []

    @app.route("/act", methods=["GET", "POST", "DELETE"])
    def act() -> Response:
        try:
            guard.check(request)
        except Refused as refused:
            return Response(refused.title, status=403)
        if request.method != "GET":
            done.append(request.method)
        return Response("ok")

    return app, done


GOOD = {"Content-Type": "application/json"}


@pytest.mark.parametrize(("headers", "title"), [
    ({"Origin": "http://evil.example"}, "Cross-site request refused"),
    ({"Origin": "null"}, "Cross-site request refused"),
    ({"Origin": "http://localhost:8089"}, "Cross-site request refused"),  # another port is another origin
    ({"Referer": "http://evil.example/x"}, "Cross-site request refused"),
    ({"Content-Type": "application/x-www-form-urlencoded"}, "JSON required"),
    ({"Content-Type": "text/plain"}, "JSON required"),
    ({"X-Chaos-Token": ""}, "Token required"),
    ({"X-Chaos-Token": "nope"}, "Token required"),
    ({"Host": "evil.example:80"}, "Host refused"),
])
def test_each_defence_alone_refuses(headers: dict[str, str], title: str) -> None:
    guard = ChaosGuard(loopback_only=True)
    app, done = guarded_app(guard)
    sent = {**GOOD, "X-Chaos-Token": guard.token, **headers}
    answer = app.test_client().post("/act", data="{}", headers=sent, base_url="http://localhost")
    assert answer.status_code == 403 and answer.text == title
    assert done == []


def test_the_pages_own_request_passes() -> None:
    guard = ChaosGuard(loopback_only=True)
    app, done = guarded_app(guard)
    client = app.test_client()
    for origin in ({"Origin": "http://127.0.0.1:8089"}, {"Referer": "http://127.0.0.1:8089/chaos/"}, {}):
        answer = client.post("/act", json={}, headers={"X-Chaos-Token": guard.token, **origin},
                             base_url="http://127.0.0.1:8089")
        assert answer.status_code == 200, (origin, answer.text)
    assert client.delete("/act", json={}, headers={"X-Chaos-Token": guard.token},
                         base_url="http://127.0.0.1:8089").status_code == 200
    assert client.get("/act", base_url="http://127.0.0.1:8089").status_code == 200  # GET needs no token
    assert done == ["POST", "POST", "POST", "DELETE"]


def test_a_web_ui_bound_elsewhere_takes_any_host_name() -> None:
    guard = ChaosGuard(loopback_only=False)
    app, done = guarded_app(guard)
    answer = app.test_client().post("/act", json={}, headers={"X-Chaos-Token": guard.token},
                                    base_url="http://loadbox.lan:8089")
    assert answer.status_code == 200 and done == ["POST"]


def test_tokens_differ_per_process_and_stay_out_of_repr() -> None:
    one, two = ChaosGuard(loopback_only=True), ChaosGuard(loopback_only=True)
    assert one.token != two.token and len(one.token) >= 40
    assert one.token not in repr(one)


def test_the_bind_rule_and_its_warning() -> None:
    assert bind_host("") == "127.0.0.1"  # Locust's default (every interface) is not kept
    assert bind_host("0.0.0.0") is None and bind_host("127.0.0.1") is None
    assert exposure_warning("127.0.0.1", 8089, False) is None
    assert exposure_warning("::1", 8089, False) is None
    warning = exposure_warning("0.0.0.0", 8089, False)
    assert warning and "every interface" in warning and "kill" in warning and "--web-login" in warning
    protected = exposure_warning("10.0.0.5", 8089, True)
    assert protected and "10.0.0.5" in protected and "--web-login is on" in protected
    assert [is_loopback(name) for name in ("localhost", "127.0.0.2", "[::1]", "10.0.0.5", "evil.example")] == \
        [True, True, True, False, False]
    assert origin_of("http://127.0.0.1:8089/chaos/?x=1") == "http://127.0.0.1:8089"
    assert origin_of("null") is None


def login_app(web_login: bool = True) -> tuple[Flask, SimpleNamespace]:
    app = Flask(__name__)
    manager = LoginManager(app)

    @app.route("/secret")
    @login_required  # what Locust's auth_required_if_enabled applies with --web-login
    def secret() -> str:
        return "in"

    return app, SimpleNamespace(web_login=web_login, login_manager=manager, app=app)


def test_basic_auth_for_web_login() -> None:
    app, web_ui = login_app()
    assert install_basic_auth(web_ui, {"HARNESS_WEB_PASSWORD": "pw", "HARNESS_WEB_USER": "ana"})
    assert app.secret_key
    client = app.test_client()
    refused = client.get("/secret")
    assert refused.status_code == 401 and refused.headers["WWW-Authenticate"].startswith("Basic")
    assert client.get("/secret", auth=("ana", "wrong")).status_code == 401
    assert client.get("/secret", auth=("harness", "pw")).status_code == 401
    assert client.get("/secret", auth=("ana", "pw")).text == "in"


def test_basic_auth_needs_a_password_and_leaves_a_locustfiles_own_login_alone() -> None:
    _, web_ui = login_app()
    with pytest.raises(HarnessError, match="HARNESS_WEB_PASSWORD"):
        install_basic_auth(web_ui, {})
    _, own = login_app()
    own.login_manager.user_loader(lambda user_id: None)
    assert install_basic_auth(own, {"HARNESS_WEB_PASSWORD": "pw"}) is False
    _, off = login_app(web_login=False)
    assert install_basic_auth(off, {}) is False
