"""Stacks sharing one Toxiproxy by proxy-name prefix; the internal token; the registry.

Each stack creates only prefixed proxies, refuses a name someone else holds, heals
only its own proxies on reset and deletes only what it created on `down`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli.main import main
from harness.nemesis.toxiproxy_client import Nemesis
from harness.stack import registry
from harness.stack.local import StackError, start_stack
from harness.toxiproxy.server import EmbeddedToxiproxy
from tests.stack.conftest import create_order, stack_ports, wait_until_gone
from tests.support.stacks import small_settings

FOREIGN = {"name": "app", "listen": "127.0.0.1:0", "upstream": "127.0.0.1:9"}


@pytest.fixture
def shared(embedded_toxiproxy: EmbeddedToxiproxy) -> str:
    nemesis = Nemesis(embedded_toxiproxy.url)
    nemesis._request("POST", "/proxies", "foreign proxy", FOREIGN)
    nemesis.add_toxic("app", "latency", attributes={"latency": 1}, name="theirs")
    return embedded_toxiproxy.url


def test_two_prefixed_stacks_share_a_toxiproxy_and_touch_only_their_own(
        tmp_path: Path, shared: str, capsys: pytest.CaptureFixture[str]) -> None:
    a = start_stack(small_settings(tmp_path / "a", toxiproxy_url=shared, proxy_prefix="a-",
                                   env={"TARGET_APP_INTERNAL_TOKEN": "given-token"}))
    try:
        b = start_stack(small_settings(tmp_path / "b", consumers=0, toxiproxy_url=shared, proxy_prefix="b-"))
        try:
            info_a, info_b = a.info, b.info
            assert info_a.proxy_prefix == "a-" and info_a.proxies == {"app": "a-app", "redis": "a-redis"}
            assert set(Nemesis(shared).proxies()) == {"app", "a-app", "a-redis", "b-app", "b-redis"}
            assert create_order(info_a.app_url).status_code == 201
            assert create_order(info_b.app_url).status_code == 201
            with pytest.raises(StackError, match="--proxy-prefix"):
                start_stack(small_settings(tmp_path / "c", consumers=0, toxiproxy_url=shared, proxy_prefix="a-"))
            assert set(Nemesis(shared).proxies()) == {"app", "a-app", "a-redis", "b-app", "b-redis"}

            # The plain names of plans and `harness fault` map to the stack's own proxies,
            # and a reset heals only those.
            nemesis_a, nemesis_b = a.nemesis(), b.nemesis()
            nemesis_a.add_toxic("app", "latency", attributes={"latency": 5}, name="mine")
            nemesis_b.add_toxic("redis", "latency", attributes={"latency": 5}, name="bs")
            nemesis_a.disable_proxy("redis")
            toxics = {(t.proxy, t.name) for t in Nemesis(shared).list_toxics()}
            assert toxics == {("app", "theirs"), ("a-app", "mine"), ("b-redis", "bs")}
            nemesis_a.reset()
            toxics = {(t.proxy, t.name) for t in Nemesis(shared).list_toxics()}
            assert toxics == {("app", "theirs"), ("b-redis", "bs")}
            assert Nemesis(shared).proxies()["a-redis"].enabled

            # `harness fault` on a prefixed stack: plain names, only its own proxies.
            root = ["--root", str(tmp_path / "a")]
            assert main(["fault", "add", "latency", "--proxy", "app", "--latency", "7", "--name", "byhand",
                         *root]) == 0
            assert ("a-app", "byhand") in {(t.proxy, t.name) for t in Nemesis(shared).list_toxics()}
            capsys.readouterr()
            assert main(["fault", "list", "--json", *root]) == 0
            listed = json.loads(capsys.readouterr().out)
            assert {p["name"] for p in listed["proxies"]} == {"app", "redis"}
            assert [(t["proxy"], t["name"]) for t in listed["toxics"]] == [("app", "byhand")]
            assert main(["fault", "clear", *root]) == 0
            toxics = {(t.proxy, t.name) for t in Nemesis(shared).list_toxics()}
            assert toxics == {("app", "theirs"), ("b-redis", "bs")}
        finally:
            b.down()
        assert set(Nemesis(shared).proxies()) == {"app", "a-app", "a-redis"}
        # The internal token: the caller's, passed to the app and the consumers, in state.json.
        info = a.info
        assert info.internal_token == "given-token"
        for service in info.services:
            if service.name in ("app", "consumer-1"):
                environ = Path(f"/proc/{service.pid}/environ").read_bytes().split(b"\0")
                assert b"TARGET_APP_INTERNAL_TOKEN=given-token" in environ
        ports = stack_ports(info)
    finally:
        a.down()
    assert set(Nemesis(shared).proxies()) == {"app"}
    assert [(t.proxy, t.name) for t in Nemesis(shared).list_toxics()] == [("app", "theirs")]
    assert wait_until_gone(tmp_path / "a", ports) == ([], [])
    assert list((registry.registry_dir() / "leases").glob("stack-*.json")) == []


def test_an_unprefixed_stack_will_not_take_a_name_in_use(tmp_path: Path, shared: str) -> None:
    with pytest.raises(StackError, match="already exists on the shared Toxiproxy"):
        start_stack(small_settings(tmp_path / "h", consumers=0, toxiproxy_url=shared))
    assert Nemesis(shared).proxies()["app"].upstream == FOREIGN["upstream"]
    assert set(Nemesis(shared).proxies()) == {"app"}  # nor left its `redis` half-made


def test_a_generated_internal_token_and_the_registry_entry(tmp_path: Path) -> None:
    root = (tmp_path / "h").resolve()
    with start_stack(small_settings(root, consumers=0)) as stack:
        info = stack.info
        token = info.internal_token
        assert len(token) == 32 and token != info.webhook_secret
        app_pid = info.service("app").pid
        assert f"TARGET_APP_INTERNAL_TOKEN={token}".encode() in \
            Path(f"/proc/{app_pid}/environ").read_bytes().split(b"\0")
        entries = [entry for entry in registry.registered_stacks() if entry["root"] == str(root)]
        assert len(entries) == 1 and entries[0]["owner"] == "up" and entries[0]["mode"] == "local"
    assert [entry for entry in registry.registered_stacks() if entry["root"] == str(root)] == []


def test_settings_reject_a_bad_prefix_or_owner() -> None:
    with pytest.raises(StackError):
        small_settings(Path("x"), proxy_prefix="has space")
    with pytest.raises(StackError):
        small_settings(Path("x"), owner="nobody")
    with pytest.raises(StackError, match="lifeline"):
        start_stack(small_settings(Path("x"), owner="run"))
