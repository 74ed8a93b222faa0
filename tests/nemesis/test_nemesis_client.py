"""The nemesis client against the embedded Toxiproxy server."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
import requests

from harness.nemesis.stack_proxies import StackNemesis
from harness.nemesis.toxiproxy_client import (
    Nemesis,
    NemesisConflict,
    NemesisError,
    NemesisHealError,
    NemesisInvalid,
    NemesisNotFound,
    NemesisUnreachable,
    NemesisVerifyError,
    ProxyInfo,
    ToxicInfo,
)
from harness.ports import free_port
from harness.toxiproxy.server import EmbeddedToxiproxy


@pytest.fixture
def upstream() -> Iterator[str]:
    """A listener that accepts and closes; enough for a proxy to point at."""
    sock = socket.create_server(("127.0.0.1", 0))
    sock.settimeout(0.1)
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
                conn.close()
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"127.0.0.1:{sock.getsockname()[1]}"
    stop.set()
    thread.join(timeout=2)
    sock.close()


@pytest.fixture
def nemesis(embedded_toxiproxy: EmbeddedToxiproxy, upstream: str) -> Nemesis:
    client = Nemesis(embedded_toxiproxy.url)
    client.ensure_proxy("app", "127.0.0.1:0", upstream)
    return client


def test_ensure_proxy_creates_then_keeps_then_replaces(embedded_toxiproxy: EmbeddedToxiproxy, upstream: str) -> None:
    client = Nemesis(embedded_toxiproxy.url)
    first = client.ensure_proxy("db", "127.0.0.1:0", upstream)
    assert isinstance(first, ProxyInfo) and first.enabled and first.upstream == upstream
    assert not first.listen.endswith(":0")
    client.add_toxic("db", "noop")
    again = client.ensure_proxy("db", "127.0.0.1:0", upstream)
    assert again == first
    assert [t.name for t in client.list_toxics()] == ["noop_downstream"]  # kept, not recreated
    client.disable_proxy("db")
    assert client.ensure_proxy("db", "127.0.0.1:0", upstream).enabled  # re-enabled
    moved = client.ensure_proxy("db", "127.0.0.1:0", "127.0.0.1:1")
    assert moved.upstream == "127.0.0.1:1"
    assert client.list_toxics() == []  # replaced
    assert set(client.proxies()) == {"db"}


def test_add_update_list_remove_toxic(nemesis: Nemesis) -> None:
    added = nemesis.add_toxic("app", "latency", stream="upstream", attributes={"latency": 50}, toxicity=0.5)
    assert added == ToxicInfo("app", "latency_upstream", "latency", "upstream", 0.5, {"latency": 50, "jitter": 0})
    named = nemesis.add_toxic("app", "limit_data", attributes={"bytes": 10}, name="cap")
    assert named.name == "cap" and named.stream == "downstream" and named.toxicity == 1.0
    updated = nemesis.update_toxic("app", "latency_upstream", attributes={"jitter": 5}, toxicity=1.0)
    assert updated.attributes == {"latency": 50, "jitter": 5} and updated.toxicity == 1.0
    assert {t.name for t in nemesis.list_toxics()} == {"latency_upstream", "cap"}
    nemesis.remove_toxic("app", "cap")
    assert [t.name for t in nemesis.list_toxics()] == ["latency_upstream"]


def test_list_toxics_spans_proxies(nemesis: Nemesis, upstream: str) -> None:
    nemesis.ensure_proxy("other", "127.0.0.1:0", upstream)
    nemesis.add_toxic("app", "noop")
    nemesis.add_toxic("other", "slicer", attributes={"average_size": 10})
    assert sorted((t.proxy, t.type) for t in nemesis.list_toxics()) == [("app", "noop"), ("other", "slicer")]


def test_disable_enable_and_reset(nemesis: Nemesis) -> None:
    nemesis.disable_proxy("app")
    assert nemesis.proxies()["app"].enabled is False
    nemesis.enable_proxy("app")
    assert nemesis.proxies()["app"].enabled is True
    nemesis.add_toxic("app", "timeout", attributes={"timeout": 0})
    nemesis.disable_proxy("app")
    nemesis.reset()
    assert nemesis.proxies()["app"].enabled is True
    assert nemesis.list_toxics() == []


@pytest.mark.parametrize(
    ("toxic_type", "kwargs"),
    [
        ("sparkles", {}),
        ("latency", {"stream": "sideways"}),
        ("latency", {"attributes": {"lag": 10}}),
        ("latency", {"attributes": {"latency": -1}}),
        ("latency", {"attributes": {"latency": "100"}}),
        ("latency", {"attributes": {"latency": True}}),
        ("latency", {"toxicity": 1.5}),
        ("noop", {"attributes": {"anything": 1}}),
    ],
)
def test_invalid_toxics_rejected_before_sending(nemesis: Nemesis, toxic_type: str, kwargs: dict) -> None:
    with pytest.raises(NemesisInvalid) as caught:
        nemesis.add_toxic("app", toxic_type, **kwargs)
    assert "\n" not in str(caught.value)
    assert nemesis.list_toxics() == []


def test_errors_raise_nemesis_errors(nemesis: Nemesis) -> None:
    with pytest.raises(NemesisNotFound):
        nemesis.add_toxic("ghost", "noop")
    with pytest.raises(NemesisNotFound):
        nemesis.remove_toxic("app", "ghost")
    with pytest.raises(NemesisNotFound):
        nemesis.update_toxic("app", "ghost", attributes={})
    with pytest.raises(NemesisNotFound):
        nemesis.disable_proxy("ghost")
    nemesis.add_toxic("app", "noop")
    with pytest.raises(NemesisConflict):
        nemesis.add_toxic("app", "noop")
    with pytest.raises(NemesisInvalid):
        nemesis.update_toxic("app", "noop_downstream", attributes={"latency": 5})
    assert issubclass(NemesisVerifyError, NemesisError)


def test_port_in_use_is_an_error_not_silence(embedded_toxiproxy: EmbeddedToxiproxy, upstream: str) -> None:
    blocker = socket.create_server(("127.0.0.1", 0))
    try:
        port = blocker.getsockname()[1]
        with pytest.raises(NemesisError) as caught:
            Nemesis(embedded_toxiproxy.url).ensure_proxy("clash", f"127.0.0.1:{port}", upstream)
        assert "address already in use" in str(caught.value)
    finally:
        blocker.close()


def test_unreachable_api() -> None:
    client = Nemesis(f"http://127.0.0.1:{free_port()}")
    with pytest.raises(NemesisUnreachable):
        client.proxies()
    with pytest.raises(NemesisUnreachable):
        client.add_toxic("app", "noop")
    with pytest.raises(NemesisUnreachable):
        client.update_toxic("app", "noop", attributes={})
    with pytest.raises(NemesisInvalid):
        Nemesis("not a url")


def test_toxic_context_heals_on_exception(nemesis: Nemesis) -> None:
    with pytest.raises(RuntimeError):
        with nemesis.toxic("app", "latency", attributes={"latency": 100}) as info:
            assert [t.name for t in nemesis.list_toxics()] == [info.name]
            raise RuntimeError("load failed")
    assert nemesis.list_toxics() == []


def test_toxic_context_tolerates_a_reset_inside(nemesis: Nemesis) -> None:
    with nemesis.toxic("app", "noop"):
        nemesis.reset()
    assert nemesis.list_toxics() == []


def test_proxy_down_heals_on_exception(nemesis: Nemesis) -> None:
    with pytest.raises(RuntimeError):
        with nemesis.proxy_down("app"):
            assert nemesis.proxies()["app"].enabled is False
            raise RuntimeError("boom")
    assert nemesis.proxies()["app"].enabled is True


def test_a_fault_that_did_not_apply_is_detected(nemesis: Nemesis, monkeypatch: pytest.MonkeyPatch) -> None:
    # Simulate a server that answers 200 but does not store the toxic.
    real_post = requests.post

    def swallowing_post(url: str, *args: object, **kwargs: object) -> requests.Response:
        if url.endswith("/toxics"):
            return requests.get(url.rsplit("/proxies", 1)[0] + "/version", timeout=5)
        return real_post(url, *args, **kwargs)

    monkeypatch.setattr(requests, "post", swallowing_post)
    with pytest.raises(NemesisVerifyError):
        nemesis.add_toxic("app", "latency", attributes={"latency": 10})


def test_a_fault_applied_wrongly_is_taken_back(nemesis: Nemesis, monkeypatch: pytest.MonkeyPatch) -> None:
    # Simulate a server that stores a different latency from the one asked for.
    real_post = requests.post

    def altering_post(url: str, *args: object, json: dict | None = None, **kwargs: object) -> requests.Response:
        if url.endswith("/toxics") and json is not None:
            json = {**json, "attributes": {"latency": 1}}
        return real_post(url, *args, json=json, **kwargs)

    monkeypatch.setattr(requests, "post", altering_post)
    with pytest.raises(NemesisVerifyError):
        nemesis.add_toxic("app", "latency", attributes={"latency": 900})
    monkeypatch.undo()
    assert nemesis.list_toxics() == []


def test_a_wrong_fault_that_cannot_be_taken_back_is_a_heal_error(nemesis: Nemesis,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # The server stores another latency than asked for, then refuses to delete it.
    real_post = requests.post

    def altering_post(url: str, *args: object, json: dict | None = None, **kwargs: object) -> requests.Response:
        if url.endswith("/toxics") and json is not None:
            json = {**json, "attributes": {"latency": 1}}
        return real_post(url, *args, json=json, **kwargs)

    def refusing_delete(url: str, **kwargs: object) -> requests.Response:
        response = requests.Response()
        response.status_code = 500
        return response

    monkeypatch.setattr(requests, "post", altering_post)
    monkeypatch.setattr(requests, "delete", refusing_delete)
    with pytest.raises(NemesisHealError) as caught:
        nemesis.add_toxic("app", "latency", attributes={"latency": 900}, name="slow")
    assert [failure.what for failure in caught.value.failures] == ["toxic slow on app"]
    assert "not as requested" in str(caught.value) and "could not heal" in str(caught.value)
    monkeypatch.undo()
    assert [t.name for t in nemesis.list_toxics()] == ["slow"]  # really still on: the error said so


def test_a_removal_the_server_acknowledges_but_does_not_do_is_caught(nemesis: Nemesis,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    nemesis.add_toxic("app", "noop")

    def pretending_delete(url: str, **kwargs: object) -> requests.Response:
        response = requests.Response()
        response.status_code = 204
        return response

    monkeypatch.setattr(requests, "delete", pretending_delete)
    with pytest.raises(NemesisVerifyError, match="still on app"):
        nemesis.remove_toxic("app", "noop_downstream")


def test_a_scoped_reset_heals_what_it_can_and_names_what_it_could_not(
        nemesis: Nemesis, upstream: str, monkeypatch: pytest.MonkeyPatch) -> None:
    nemesis.ensure_proxy("t1-redis", "127.0.0.1:0", upstream)
    nemesis.ensure_proxy("t1-app", "127.0.0.1:0", upstream)
    scoped = StackNemesis(nemesis, {"app": "t1-app", "redis": "t1-redis"}, shared=True)
    scoped.add_toxic("app", "noop", name="stuck")
    scoped.add_toxic("redis", "noop", name="loose")
    scoped.disable_proxy("redis")
    real_remove = Nemesis.remove_toxic

    def refuse_stuck(self: Nemesis, proxy: str, name: str) -> None:
        if name == "stuck":
            raise NemesisError(f"remove toxic {name} from {proxy}: toxiproxy refused")
        real_remove(self, proxy, name)

    monkeypatch.setattr(Nemesis, "remove_toxic", refuse_stuck)
    with pytest.raises(NemesisHealError) as caught:
        scoped.reset()
    assert [failure.what for failure in caught.value.failures] == ["toxic stuck on t1-app"]
    assert {t.name for t in nemesis.list_toxics()} == {"stuck"}  # the other toxic went
    assert nemesis.proxies()["t1-redis"].enabled  # and the proxy came back
    assert nemesis.proxies()["app"].enabled  # another team's proxy was never touched
