"""Conformance with Toxiproxy 2.12.0 on what its own suites and clients observe:
headers, the exact bytes of answers, listen addresses (resolved before comparing,
random when empty), bind errors and `/populate` edge cases.

Each expectation comes from the Go server's behaviour: its router answers unknown
paths and methods before its middleware (so without a request id), `http.Error`
makes errors plain text with `nosniff`, `encoding/json` writes compact JSON, and
`net.Listen` / `net.ResolveTCPAddr` decide listen addresses.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
from email.utils import parsedate_to_datetime

import pytest
import requests
from tp_helpers import EchoServer, connect, recv_exactly

from harness.toxiproxy.server import EmbeddedToxiproxy

REQUEST_ID = re.compile(r"[0-9a-v]{20}")
TEXT = "text/plain; charset=utf-8"


def request(
    server: EmbeddedToxiproxy, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    """One raw HTTP exchange: status, headers (lower-case names) and the exact body."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=5)
    try:
        conn.request(method, path, body=body, headers={"User-Agent": "conformance", **(headers or {})})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def create(server: EmbeddedToxiproxy, **body: object) -> requests.Response:
    return requests.post(f"{server.url}/proxies", json=body, timeout=5)


def port_of(listen: str) -> int:
    return int(listen.rsplit(":", 1)[1])


def free_loopback_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ping(sock: socket.socket, payload: bytes = b"ping") -> bytes:
    sock.sendall(payload)
    return recv_exactly(sock, len(payload))


# -- headers ----------------------------------------------------------------------

def test_every_routed_answer_has_a_request_id_and_a_date(embedded_toxiproxy: EmbeddedToxiproxy, make_proxy) -> None:
    make_proxy("p")
    calls = [
        ("GET", "/version", None, 200),
        ("GET", "/proxies", None, 200),
        ("GET", "/proxies/p", None, 200),
        ("GET", "/proxies/missing", None, 404),
        ("POST", "/proxies", b"{", 400),
        ("POST", "/proxies/p/toxics", b'{"type": "noop"}', 200),
        ("DELETE", "/proxies/p/toxics/noop_downstream", None, 204),
        ("POST", "/populate", b"[]", 201),
        ("POST", "/reset", None, 204),
    ]
    ids = set()
    for method, path, body, status in calls:
        got, headers, _ = request(embedded_toxiproxy, method, path, body)
        assert got == status, (method, path)
        assert REQUEST_ID.fullmatch(headers.get("x-toxiproxy-request-id", "")), (method, path, headers)
        ids.add(headers["x-toxiproxy-request-id"])
        assert parsedate_to_datetime(headers["date"]).tzinfo is not None, headers["date"]
    assert len(ids) == len(calls)  # one id per request


def test_router_answers_have_a_date_but_no_request_id(embedded_toxiproxy: EmbeddedToxiproxy) -> None:
    # Unknown paths and wrong methods never reach Toxiproxy's middleware.
    for method, path, status in [("GET", "/nothing", 404), ("PUT", "/proxies", 405), ("GET", "/metrics", 404)]:
        got, headers, _ = request(embedded_toxiproxy, method, path)
        assert got == status
        assert "x-toxiproxy-request-id" not in headers
        assert "date" in headers


def test_browsers_get_403_as_plain_text_on_routes_only(embedded_toxiproxy: EmbeddedToxiproxy) -> None:
    browser = {"User-Agent": "Mozilla/5.0 (X11; Linux x86_64)"}
    status, headers, body = request(embedded_toxiproxy, "GET", "/proxies", headers=browser)
    assert (status, body) == (403, b"User agent not allowed\n")
    assert headers["content-type"] == TEXT and headers["x-content-type-options"] == "nosniff"
    assert REQUEST_ID.fullmatch(headers["x-toxiproxy-request-id"])
    assert request(embedded_toxiproxy, "GET", "/nothing", headers=browser)[0] == 404
    assert request(embedded_toxiproxy, "GET", "/version", headers={"User-Agent": "Wget/1.21"})[0] == 200


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "message"),
    [
        ("GET", "/proxies/nope", None, 404, "proxy not found"),
        ("POST", "/proxies", b'{"name": "x"}', 400, "missing required field: upstream"),
        ("POST", "/proxies", b"", 400, "bad request body: EOF"),
        ("GET", "/proxies/p/toxics/nope", None, 404, "toxic not found"),
        ("POST", "/proxies/p/toxics", b'{"type": "sparkles"}', 400, "invalid toxic type"),
    ],
)
def test_errors_are_json_sent_as_plain_text(
    embedded_toxiproxy: EmbeddedToxiproxy, make_proxy, method: str, path: str, body: bytes | None, status: int,
    message: str,
) -> None:
    make_proxy("p")
    got, headers, raw = request(embedded_toxiproxy, method, path, body)
    assert got == status
    assert headers["content-type"] == TEXT
    assert headers["x-content-type-options"] == "nosniff"
    assert raw == json.dumps({"error": message, "status": status}, separators=(",", ":")).encode() + b"\n"


def test_not_found_and_method_not_allowed_bodies(embedded_toxiproxy: EmbeddedToxiproxy) -> None:
    status, headers, body = request(embedded_toxiproxy, "GET", "/nothing")
    assert (status, body, headers["content-type"], headers["x-content-type-options"]) == (
        404, b"404 page not found\n", TEXT, "nosniff"
    )
    status, headers, body = request(embedded_toxiproxy, "DELETE", "/version")
    assert (status, body) == (405, b"") and "content-type" not in headers


# -- JSON bodies --------------------------------------------------------------------

def test_json_is_compact_like_gos_encoder(embedded_toxiproxy: EmbeddedToxiproxy, echo: EchoServer) -> None:
    body = json.dumps({"name": "db", "listen": "127.0.0.1:0", "upstream": echo.address}).encode()
    status, headers, raw = request(embedded_toxiproxy, "POST", "/proxies", body)
    assert status == 201 and headers["content-type"] == "application/json"
    listen = json.loads(raw)["listen"]
    assert raw == (
        b'{"name":"db","listen":"' + listen.encode() + b'","upstream":"' + echo.address.encode()
        + b'","enabled":true,"Logger":{},"toxics":[]}'
    )
    toxic = b'{"type": "latency", "attributes": {"latency": 5}}'
    status, _, raw = request(embedded_toxiproxy, "POST", "/proxies/db/toxics", toxic)
    assert (status, raw) == (
        200,
        b'{"attributes":{"latency":5,"jitter":0},"name":"latency_downstream","type":"latency",'
        b'"stream":"downstream","toxicity":1}',
    )


@pytest.mark.parametrize(
    ("sent", "shown"), [(0.1, b"0.1"), (0.5, b"0.5"), (1, b"1"), (0, b"0"), (0.3333333333, b"0.33333334")]
)
def test_toxicity_is_printed_as_a_float32(
    embedded_toxiproxy: EmbeddedToxiproxy, make_proxy, sent: float, shown: bytes
) -> None:
    make_proxy("p")
    body = json.dumps({"type": "noop", "toxicity": sent}).encode()
    status, _, raw = request(embedded_toxiproxy, "POST", "/proxies/p/toxics", body)
    assert status == 200
    assert raw.endswith(b'"toxicity":' + shown + b"}")


def test_html_characters_are_escaped_like_go(embedded_toxiproxy: EmbeddedToxiproxy, make_proxy) -> None:
    make_proxy("p")
    body = json.dumps({"name": "<a&b>", "type": "noop"}).encode()
    status, _, raw = request(embedded_toxiproxy, "POST", "/proxies/p/toxics", body)
    assert status == 200
    assert b'"name":"\\u003ca\\u0026b\\u003e"' in raw
    assert json.loads(raw)["name"] == "<a&b>"


def test_proxy_index_is_sorted_by_name(embedded_toxiproxy: EmbeddedToxiproxy, make_proxy) -> None:
    for name in ("zeta", "alpha", "mid"):
        make_proxy(name)
    _, _, raw = request(embedded_toxiproxy, "GET", "/proxies")
    assert list(json.loads(raw)) == ["alpha", "mid", "zeta"]
    assert raw.index(b'"alpha"') < raw.index(b'"mid"') < raw.index(b'"zeta"')


# -- empty listen, name conflicts, bind errors ------------------------------------------

@pytest.mark.parametrize("listen", [None, ""])
def test_empty_or_missing_listen_takes_a_random_port_on_all_interfaces(
    embedded_toxiproxy: EmbeddedToxiproxy, echo: EchoServer, listen: str | None
) -> None:
    body = {"name": "anywhere", "upstream": echo.address}
    if listen is not None:
        body["listen"] = listen
    response = requests.post(f"{embedded_toxiproxy.url}/proxies", json=body, timeout=5)
    try:
        assert response.status_code == 201, response.text
        shown = response.json()["listen"]
        assert re.fullmatch(r"\[::\]:\d+", shown), shown
        assert port_of(shown) > 0
        with connect(port_of(shown)) as sock:  # all interfaces include loopback
            assert ping(sock) == b"ping"
        again = requests.post(f"{embedded_toxiproxy.url}/proxies", json=body, timeout=5)
        assert (again.status_code, again.json()) == (409, {"error": "proxy already exists", "status": 409})
    finally:
        requests.delete(f"{embedded_toxiproxy.url}/proxies/anywhere", timeout=5)


def test_bind_error_names_the_resolved_address(embedded_toxiproxy: EmbeddedToxiproxy) -> None:
    blocker = socket.create_server(("127.0.0.1", 0))
    busy = blocker.getsockname()[1]
    try:
        response = create(embedded_toxiproxy, name="clash", listen=f"localhost:{busy}", upstream="127.0.0.1:1")
        assert response.status_code == 500
        assert response.json() == {
            "error": f"listen tcp 127.0.0.1:{busy}: bind: address already in use", "status": 500
        }
        # The same message when an existing proxy is moved onto the busy port.
        assert create(embedded_toxiproxy, name="mover", listen="127.0.0.1:0", upstream="127.0.0.1:1").status_code == 201
        moved = requests.patch(
            f"{embedded_toxiproxy.url}/proxies/mover", json={"listen": f"localhost:{busy}"}, timeout=5
        )
        assert moved.json()["error"] == f"listen tcp 127.0.0.1:{busy}: bind: address already in use"
    finally:
        blocker.close()


def test_listen_without_a_port_is_500_with_gos_message(embedded_toxiproxy: EmbeddedToxiproxy) -> None:
    response = create(embedded_toxiproxy, name="bad", listen="local373", upstream="127.0.0.1:1")
    assert response.json() == {"error": "listen tcp: address local373: missing port in address", "status": 500}


# -- resolved listen addresses: unchanged proxies are kept ----------------------------------

def test_populate_with_localhost_keeps_the_proxy_its_toxics_and_connections(
    embedded_toxiproxy: EmbeddedToxiproxy, echo: EchoServer, make_proxy
) -> None:
    port = make_proxy("one")  # listening on 127.0.0.1:port
    requests.post(f"{embedded_toxiproxy.url}/proxies/one/toxics", json={"type": "noop", "name": "marker"}, timeout=5)
    with connect(port) as sock:
        assert ping(sock) == b"ping"
        body = [{"name": "one", "listen": f"localhost:{port}", "upstream": echo.address}]
        response = requests.post(f"{embedded_toxiproxy.url}/populate", json=body, timeout=5)
        assert response.status_code == 201
        (proxy,) = response.json()["proxies"]
        assert proxy["listen"] == f"127.0.0.1:{port}"
        assert [toxic["name"] for toxic in proxy["toxics"]] == ["marker"]
        assert ping(sock, b"still open") == b"still open"


def test_update_with_an_equivalent_listen_does_not_restart(
    embedded_toxiproxy: EmbeddedToxiproxy, echo: EchoServer, make_proxy
) -> None:
    port = make_proxy("one")
    requests.post(f"{embedded_toxiproxy.url}/proxies/one/toxics", json={"type": "noop", "name": "marker"}, timeout=5)
    with connect(port) as sock:
        assert ping(sock) == b"ping"
        for listen in (f"localhost:{port}", f"127.0.0.1:{port}"):
            response = requests.patch(f"{embedded_toxiproxy.url}/proxies/one", json={"listen": listen}, timeout=5)
            assert response.status_code == 200
            assert response.json()["listen"] == f"127.0.0.1:{port}"
            assert [toxic["name"] for toxic in response.json()["toxics"]] == ["marker"]
            assert ping(sock, listen.encode()) == listen.encode()


def test_update_with_a_new_listen_restarts_and_cuts_connections(
    embedded_toxiproxy: EmbeddedToxiproxy, make_proxy
) -> None:
    port = make_proxy("one")
    new_port = free_loopback_port()
    with connect(port) as sock:
        assert ping(sock) == b"ping"
        response = requests.patch(
            f"{embedded_toxiproxy.url}/proxies/one", json={"listen": f"localhost:{new_port}"}, timeout=5
        )
        assert response.status_code == 200 and response.json()["listen"] == f"127.0.0.1:{new_port}"
        try:
            sock.sendall(b"x")
            assert sock.recv(16) == b""
        except ConnectionError:
            pass  # a reset is as good as a close here
    with connect(new_port) as sock:
        assert ping(sock) == b"ping"


def test_populate_with_a_changed_upstream_replaces_the_proxy(
    embedded_toxiproxy: EmbeddedToxiproxy, echo: EchoServer, make_proxy
) -> None:
    port = make_proxy("one")
    requests.post(f"{embedded_toxiproxy.url}/proxies/one/toxics", json={"type": "noop"}, timeout=5)
    body = [{"name": "one", "listen": f"localhost:{port}", "upstream": "127.0.0.1:2"}]
    (proxy,) = requests.post(f"{embedded_toxiproxy.url}/populate", json=body, timeout=5).json()["proxies"]
    assert (proxy["upstream"], proxy["toxics"], proxy["listen"]) == ("127.0.0.1:2", [], f"127.0.0.1:{port}")


def test_populate_stops_at_an_address_that_does_not_resolve(embedded_toxiproxy: EmbeddedToxiproxy, make_proxy) -> None:
    make_proxy("one")
    body = [
        {"name": "fresh", "listen": "127.0.0.1:0", "upstream": "127.0.0.1:1"},
        {"name": "one", "listen": "no-port-here", "upstream": "127.0.0.1:1"},
        {"name": "never", "listen": "127.0.0.1:0", "upstream": "127.0.0.1:1"},
    ]
    status, headers, raw = request(embedded_toxiproxy, "POST", "/populate", json.dumps(body).encode())
    payload = json.loads(raw)
    assert status == 500 and headers["content-type"] == "application/json"
    assert payload["error"] == "address no-port-here: missing port in address" and payload["status"] == 500
    assert [proxy["name"] for proxy in payload["proxies"]] == ["fresh"]
    assert sorted(requests.get(f"{embedded_toxiproxy.url}/proxies", timeout=5).json()) == ["fresh", "one"]


# -- /populate edge cases --------------------------------------------------------------------

@pytest.mark.parametrize("body", [b"[]", b"null"])
def test_populate_with_nothing_answers_null_proxies(embedded_toxiproxy: EmbeddedToxiproxy, body: bytes) -> None:
    status, headers, raw = request(embedded_toxiproxy, "POST", "/populate", body)
    assert (status, raw) == (201, b'{"proxies":null}')
    assert headers["content-type"] == "application/json"


def test_populate_errors_are_json_with_null_proxies(embedded_toxiproxy: EmbeddedToxiproxy) -> None:
    body = json.dumps([{"name": "a", "upstream": "127.0.0.1:1"}, {"listen": "127.0.0.1:0"}]).encode()
    status, headers, raw = request(embedded_toxiproxy, "POST", "/populate", body)
    assert status == 400
    assert headers["content-type"] == "application/json" and "x-content-type-options" not in headers
    assert raw == b'{"error":"missing required field: name at proxy 2","status":400,"proxies":null}'
    assert requests.get(f"{embedded_toxiproxy.url}/proxies", timeout=5).json() == {}


def test_populate_defaults_to_enabled_and_honours_disabled(
    embedded_toxiproxy: EmbeddedToxiproxy, echo: EchoServer
) -> None:
    body = [
        {"name": "on", "listen": "127.0.0.1:0", "upstream": echo.address},
        {"name": "off", "listen": "127.0.0.1:0", "upstream": echo.address, "enabled": False},
    ]
    response = requests.post(f"{embedded_toxiproxy.url}/populate", json=body, timeout=5)
    assert response.status_code == 201
    on, off = response.json()["proxies"]
    assert (on["enabled"], off["enabled"]) == (True, False)
    assert off["listen"] == "127.0.0.1:0"  # not started: kept as sent
    with connect(port_of(on["listen"])) as sock:
        assert ping(sock) == b"ping"


def test_unclean_paths_are_redirected_to_their_clean_form(embedded_toxiproxy: EmbeddedToxiproxy) -> None:
    # gorilla/mux redirects before routing, so no route or middleware sees these.
    for path, location in [
        ("//proxies", "/proxies"),
        ("/proxies/../version", "/version"),
        ("/./version?x=1", "/version?x=1"),
        ("/proxies/a//toxics/", "/proxies/a/toxics/"),
    ]:
        status, headers, body = request(embedded_toxiproxy, "GET", path)
        assert (status, headers.get("location"), body) == (301, location, b""), path
        assert "x-toxiproxy-request-id" not in headers


# -- request bodies as Go's json.Decoder reads them ---------------------------------------

@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "EOF"),
        (b"{", "unexpected EOF"),
        (b"{bad", "invalid character 'b' looking for beginning of object key string"),
        (b'{"name" "x"}', "invalid character '\"' after object key"),
        (b'{"name": "x" "upstream": "y"}', "invalid character '\"' after object key:value pair"),
        (b'{"name": }', "invalid character '}' looking for beginning of value"),
        (b"[1]", "json: cannot unmarshal array into Go value of type toxiproxy.Proxy"),
        (b'{"name": 5, "upstream": "x"}', "json: cannot unmarshal number into Go struct field Proxy.name of type string"),
        (b'{"name": "a", "upstream": "x", "enabled": "yes"}',
         "json: cannot unmarshal string into Go struct field Proxy.enabled of type bool"),
    ],
)
def test_bad_bodies_get_gos_decoder_messages(embedded_toxiproxy: EmbeddedToxiproxy, body: bytes, message: str) -> None:
    status, _, raw = request(embedded_toxiproxy, "POST", "/proxies", body)
    assert status == 400
    assert json.loads(raw) == {"error": f"bad request body: {message}", "status": 400}


def test_keys_match_case_insensitively_and_trailing_data_is_ignored(
    embedded_toxiproxy: EmbeddedToxiproxy, echo: EchoServer
) -> None:
    body = b'{"Name": "ci", "LISTEN": "127.0.0.1:0", "upstream": "' + echo.address.encode() + b'"} and then some'
    status, _, raw = request(embedded_toxiproxy, "POST", "/proxies", body)
    assert status == 201, raw
    assert json.loads(raw)["name"] == "ci"
    toxic = b'{"Type": "latency", "Stream": "upstream", "Attributes": {"Latency": 7}}'
    status, _, raw = request(embedded_toxiproxy, "POST", "/proxies/ci/toxics", toxic)
    assert status == 200, raw
    assert json.loads(raw)["attributes"] == {"latency": 7, "jitter": 0}
    assert json.loads(raw)["stream"] == "upstream"


def test_integer_attributes_refuse_fractions_and_exponents_by_their_text(
    embedded_toxiproxy: EmbeddedToxiproxy, make_proxy
) -> None:
    make_proxy("p")
    for literal in ("1e3", "1.0", "1.5"):
        body = b'{"type": "latency", "attributes": {"latency": ' + literal.encode() + b"}}"
        status, _, raw = request(embedded_toxiproxy, "POST", "/proxies/p/toxics", body)
        assert status == 400
        assert json.loads(raw)["error"] == (
            f"bad request body: json: cannot unmarshal number {literal} into Go struct field "
            "LatencyToxic.attributes.latency of type int64"
        )


def test_null_bodies_change_nothing_like_a_go_struct_decode(embedded_toxiproxy: EmbeddedToxiproxy, make_proxy) -> None:
    status, _, raw = request(embedded_toxiproxy, "POST", "/proxies", b"null")
    assert (status, json.loads(raw)["error"]) == (400, "missing required field: name")
    make_proxy("p")
    before = requests.get(f"{embedded_toxiproxy.url}/proxies/p", timeout=5).json()
    status, _, raw = request(embedded_toxiproxy, "PATCH", "/proxies/p", b"null")
    assert (status, json.loads(raw)) == (200, before)


def test_type_errors_name_gos_anonymous_structs(embedded_toxiproxy: EmbeddedToxiproxy, make_proxy) -> None:
    status, _, raw = request(embedded_toxiproxy, "POST", "/populate", b'[{"name": 5}]')
    assert (status, json.loads(raw)["error"]) == (
        400, "bad request body: json: cannot unmarshal number into Go struct field .name of type string"
    )
    make_proxy("p")
    request(embedded_toxiproxy, "POST", "/proxies/p/toxics", b'{"type": "latency"}')
    status, _, raw = request(embedded_toxiproxy, "PATCH", "/proxies/p/toxics/latency_downstream", b'{"toxicity": "x"}')
    assert (status, json.loads(raw)["error"]) == (
        400, "bad request body: json: cannot unmarshal string into Go struct field .toxicity of type float32"
    )
    status, _, raw = request(embedded_toxiproxy, "POST", "/proxies/p/toxics", b'{"type": "latency", "attributes": [1]}')
    assert json.loads(raw)["error"] == (
        "bad request body: json: cannot unmarshal array into Go struct field ToxicWrapper.attributes "
        "of type toxics.NoopToxic"
    )
