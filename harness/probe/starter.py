"""`harness probe init --openapi FILE`: a commented starter probe config from a
service's OpenAPI document.

`load_openapi(path)` reads the document (YAML or JSON) and validates it with
openapi-spec-validator; anything that is not an OpenAPI 3.x document is a
`ProbeConfigError` in one line naming the file (exit 2). `starter_endpoints(document)`
turns every POST, PUT and PATCH operation that takes an `Idempotency-Key` header
(the operation's or its path's parameters, `$ref`s resolved with `referencing`) into a
`StarterEndpoint`:

- `body`: a template from the JSON request schema: a string becomes `{uuid}` (an
  `enum` `{choice:a|b}`, a `format` of date/time/email a fixed example), an integer
  `{int:min-max}` (the schema's bounds, else 1-1000), a number an int the same way, a
  boolean `true`, an object its properties (the required ones, or all when none is
  required), an array one item; `allOf` is merged, `oneOf`/`anyOf` take the first. A
  body with no generated field gets `mutate` (its first field), one that is not an
  object `{"ref": "{uuid}"}`;
- `id`: `/id` when the 2xx answer's schema has an `id` property (else a guess to
  confirm);
- `read` and `search`: guessed from the GET operations: `<path>/{param}` for the
  read-back, a GET on the path itself with a key-like query parameter for the search;
  each marked in the output for the user to confirm;
- `expect`: the codes the operation's documented responses give the key's misuses,
  each commented with the response it came from. Codes written in `expect:` are the
  user's contract and always checked, so only what the document says is written:
  `missing_key` (a required header only) from a 400 whose description names the key
  or a header, else from a 422 that is a validation error (FastAPI documents
  `422 Validation Error`, `HTTPValidationError`, on every operation with a required
  header, and answers a request without it so); `payload_mismatch` from a 409 or 422
  whose description says the key was reused with another payload (mismatch,
  different, reused, does not match); `in_flight` from a 409 (or 425, 429) whose
  description says a request with the key is still in progress. Without any, no
  `expect:` is written and the profile's codes apply (advice, harness.probe.levels).

`render_starter(endpoints, source)` writes the YAML text, each guess commented; it
parses with `harness.probe.config.parse_config` as it is.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openapi_spec_validator import validate
from openapi_spec_validator.validation.exceptions import OpenAPIValidationError
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from harness.documents import load_yaml
from harness.generators import is_generated
from harness.probe.config import ProbeConfigError

KEY_HEADER = "idempotency-key"
WRITES = ("post", "put", "patch")
DEFAULT_INT = (1, 1000)
MAX_DEPTH = 6  # a recursive schema stops here
_BASE = "urn:harness:openapi"
_EXAMPLES = {"date": "2026-01-01", "date-time": "2026-01-01T00:00:00Z", "email": "probe@example.com",
             "uri": "https://example.com/probe"}


@dataclass(frozen=True)
class StarterEndpoint:
    """One endpoint of the starter config, with what was guessed."""

    name: str
    method: str
    path: str
    body: Any
    mutate: str | None  # a body with no generated field: the field the payload mismatch changes
    requires_key: bool
    id_pointer: str
    id_guessed: bool  # no `id` property in the 2xx schema: /id is a guess
    read_path: str | None  # guessed from a GET `<path>/{param}`
    search_path: str | None  # guessed from a GET on the path with a key-like query parameter
    # misuse -> (code, the documented response it came from), e.g. {"missing_key": (422, "Validation Error")}
    expect: Mapping[str, tuple[int, str]] = field(default_factory=dict)


def load_openapi(path: Path) -> dict[str, Any]:
    """The validated OpenAPI document at `path`; ProbeConfigError (one line) otherwise."""
    try:
        document = load_yaml(path, error=ProbeConfigError, what="the OpenAPI document")
    except ProbeConfigError as error:
        raise ProbeConfigError(f"--openapi: {error}") from None
    if not isinstance(document, dict) or not str(document.get("openapi", "")).startswith("3."):
        raise ProbeConfigError(f"--openapi: {path}: not an OpenAPI 3 document (no `openapi: 3.x` at the top)")
    try:
        validate(document)
    except OpenAPIValidationError as error:
        where = "/".join(str(part) for part in getattr(error, "path", ())) or "document"
        message = str(getattr(error, "message", error)).splitlines()[0]
        raise ProbeConfigError(f"--openapi: {path}: not a valid OpenAPI document at {where}: {message}") from None
    return document


class _Refs:
    """Local `$ref`s of one document, looked up with `referencing`."""

    def __init__(self, document: Mapping[str, Any]) -> None:
        resource = Resource.from_contents(document, default_specification=DRAFT202012)
        self._resolver = Registry().with_resource(_BASE, resource).resolver(base_uri=_BASE)

    def deref(self, node: Any) -> Any:
        seen = 0
        while isinstance(node, Mapping) and isinstance(node.get("$ref"), str) and seen < MAX_DEPTH:
            try:
                node = self._resolver.lookup(node["$ref"]).contents
            except Unresolvable:
                raise ProbeConfigError(f"--openapi: $ref {node['$ref']!r} cannot be resolved (only references "
                                       "inside the document are followed)") from None
            seen += 1
        return node


def starter_endpoints(document: Mapping[str, Any]) -> list[StarterEndpoint]:
    """Every write operation of `document` that takes an Idempotency-Key header, as an endpoint."""
    refs = _Refs(document)
    paths: Mapping[str, Any] = document.get("paths") or {}
    found = []
    for path, item in paths.items():
        item = refs.deref(item)
        for method in WRITES:
            operation = item.get(method)
            if not isinstance(operation, Mapping):
                continue
            header = _key_header(refs, [*(item.get("parameters") or []), *(operation.get("parameters") or [])])
            if header is None:
                continue
            id_pointer, guessed = _id_pointer(refs, operation)
            body = _request_body(refs, operation)
            mutate = None
            if not is_generated(body):
                mutate = next(iter(body), None) if isinstance(body, dict) else None
                if mutate is None:
                    body = {"ref": "{uuid}"}
            found.append(StarterEndpoint(
                name=_name(operation, method, path), method=method.upper(), path=_probe_path(path),
                body=body, mutate=mutate, requires_key=bool(header.get("required")),
                id_pointer=id_pointer, id_guessed=guessed, read_path=_read_path(refs, paths, path),
                search_path=_search_path(refs, paths, path),
                expect=documented_codes(refs, operation, requires_key=bool(header.get("required")))))
    return found


_KEY_WORDS = re.compile(r"idempotency|\bkey\b|header", re.I)
_VALIDATION = re.compile(r"validation", re.I)
_MISMATCH = re.compile(r"mismatch|different|reused|re-used|does not match|another (payload|body|request)", re.I)
_IN_PROGRESS = re.compile(r"in progress|in-progress|in flight|in-flight|still running|concurrent|being processed",
                          re.I)


def documented_codes(refs: _Refs, operation: Mapping[str, Any], *,
                     requires_key: bool) -> dict[str, tuple[int, str]]:
    """The codes the operation's documented responses give the key's misuses (the
    module docstring): misuse -> (code, the response's description)."""
    responses: dict[int, str] = {}
    for code, response in (operation.get("responses") or {}).items():
        if not str(code).isdigit():
            continue  # `default`, `4XX`: no one code to expect
        response = refs.deref(response)
        if not isinstance(response, Mapping):
            continue
        schema = json.dumps(response.get("content") or {})
        responses[int(code)] = f"{response.get('description') or ''} {schema}".strip()
    found: dict[str, tuple[int, str]] = {}

    def describe(code: int) -> str:
        return str(refs.deref((operation.get("responses") or {}).get(str(code), {})).get("description") or "").strip()

    if requires_key:
        if 400 in responses and _KEY_WORDS.search(responses[400]):
            found["missing_key"] = (400, describe(400))
        elif 422 in responses and _VALIDATION.search(responses[422]) and not _MISMATCH.search(describe(422)):
            found["missing_key"] = (422, describe(422))
    for code in (409, 422):
        if code in responses and _MISMATCH.search(describe(code)):
            found["payload_mismatch"] = (code, describe(code))
            break
    for code in (409, 425, 429):
        if code in responses and _IN_PROGRESS.search(describe(code)):
            found["in_flight"] = (code, describe(code))
            break
    return found


def starter_config(path: Path) -> str:
    """The starter config's text for the OpenAPI document at `path`."""
    endpoints = starter_endpoints(load_openapi(path))
    if not endpoints:
        raise ProbeConfigError(f"--openapi: {path}: no POST, PUT or PATCH operation takes an Idempotency-Key "
                               "header parameter: nothing to probe")
    return render_starter(endpoints, str(path))


def _key_header(refs: _Refs, parameters: Sequence[Any]) -> Mapping[str, Any] | None:
    for parameter in parameters:
        parameter = refs.deref(parameter)
        if (isinstance(parameter, Mapping) and parameter.get("in") == "header"
                and str(parameter.get("name", "")).lower() == KEY_HEADER):
            return parameter
    return None


def _name(operation: Mapping[str, Any], method: str, path: str) -> str:
    raw = str(operation.get("operationId") or f"{method}-{path}")
    return re.sub(r"[^A-Za-z0-9_.]+", "-", raw).strip("-")[:63] or method


def _probe_path(path: str) -> str:
    """An OpenAPI path template as a probe path: each `{param}` becomes a fresh `{uuid}`
    (the probe's generator), since the probe has no id of its own to put there."""
    return re.sub(r"\{[^{}]+\}", "{uuid}", path)


def _json_schema(refs: _Refs, content: Any) -> Any:
    content = refs.deref(content)
    if not isinstance(content, Mapping):
        return None
    media = next((value for name, value in content.items() if "json" in str(name)), None)
    return refs.deref(media.get("schema")) if isinstance(media, Mapping) else None


def _request_body(refs: _Refs, operation: Mapping[str, Any]) -> Any:
    body = refs.deref(operation.get("requestBody"))
    schema = _json_schema(refs, body.get("content")) if isinstance(body, Mapping) else None
    template = template_of(refs, schema) if schema is not None else None
    return template if isinstance(template, dict) else {"ref": "{uuid}"}


def template_of(refs: _Refs, schema: Any, depth: int = 0) -> Any:
    """A body template (the probe's generators) that fits `schema`."""
    schema = refs.deref(schema)
    if not isinstance(schema, Mapping) or depth > MAX_DEPTH:
        return "{uuid}"
    if "allOf" in schema:
        merged: dict[str, Any] = {"type": "object", "properties": {}, "required": []}
        for part in schema["allOf"]:
            part = refs.deref(part)
            if isinstance(part, Mapping):
                merged["properties"].update(part.get("properties") or {})
                merged["required"] += list(part.get("required") or [])
        return template_of(refs, merged, depth + 1)
    for choice in ("oneOf", "anyOf"):
        if schema.get(choice):
            return template_of(refs, schema[choice][0], depth + 1)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        values = [value for value in schema["enum"] if value is not None]
        if values and all(isinstance(value, str) and "|" not in value and "}" not in value for value in values):
            return f"{{choice:{'|'.join(values)}}}" if len(values) > 1 else values[0]
        return values[0] if values else None
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    if kind == "object" or (kind is None and "properties" in schema):
        properties: Mapping[str, Any] = schema.get("properties") or {}
        required = [name for name in schema.get("required") or [] if name in properties]
        names = required or list(properties)
        return {name: template_of(refs, properties[name], depth + 1) for name in names}
    if kind == "array":
        return [template_of(refs, schema.get("items"), depth + 1)]
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum"))
        high = schema.get("maximum", schema.get("exclusiveMaximum"))
        low = int(low) + (1 if "minimum" not in schema and low is not None else 0) if low is not None else None
        high = int(high) - (1 if "maximum" not in schema and high is not None else 0) if high is not None else None
        low = DEFAULT_INT[0] if low is None else low
        high = max(low, DEFAULT_INT[1] if high is None else high)
        return f"{{int:{low}-{high}}}"
    if kind == "boolean":
        return True
    if kind == "string" and schema.get("format") in _EXAMPLES:
        return _EXAMPLES[str(schema["format"])]
    return "{uuid}"


def _id_pointer(refs: _Refs, operation: Mapping[str, Any]) -> tuple[str, bool]:
    responses: Mapping[Any, Any] = operation.get("responses") or {}
    for status in sorted(responses, key=str):
        if not str(status).startswith("2"):
            continue
        response = refs.deref(responses[status])
        schema = _json_schema(refs, response.get("content")) if isinstance(response, Mapping) else None
        properties = schema.get("properties") if isinstance(schema, Mapping) else None
        if isinstance(properties, Mapping) and "id" in properties:
            return "/id", False
    return "/id", True


def _read_path(refs: _Refs, paths: Mapping[str, Any], path: str) -> str | None:
    """`<path>/{param}` with a GET, as a read-back path (`{id}`), else the first GET with
    one parameter more than the write's path shares its prefix."""
    base = path.rstrip("/")
    for candidate, item in paths.items():
        item = refs.deref(item)
        if isinstance(item, Mapping) and "get" in item and re.fullmatch(re.escape(base) + r"/\{[^{}/]+\}", candidate):
            return _probe_path(base) + "/{id}"
    return None


def _search_path(refs: _Refs, paths: Mapping[str, Any], path: str) -> str | None:
    """A GET on the write's own path with a query parameter named like a key."""
    item = refs.deref(paths.get(path))
    get = item.get("get") if isinstance(item, Mapping) else None
    if not isinstance(get, Mapping):
        return None
    for parameter in [*(item.get("parameters") or []), *(get.get("parameters") or [])]:
        parameter = refs.deref(parameter)
        if isinstance(parameter, Mapping) and parameter.get("in") == "query" and \
                "key" in str(parameter.get("name", "")).lower().replace("-", "_"):
            return f"{_probe_path(path)}?{parameter['name']}={{key}}"
    return None


def _one_line(text: str) -> str:
    """A description fit for a YAML comment: one line, at most 60 characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= 60 else flat[:57] + "..."


def _flow(value: Any) -> str:
    """A YAML flow value (JSON is YAML): templates keep their braces quoted."""
    return json.dumps(value, ensure_ascii=False)


def render_starter(endpoints: Sequence[StarterEndpoint], source: str) -> str:
    """The starter config as commented YAML."""
    lines = [
        f"# A starter probe config written by `harness probe init --openapi {source}`.",
        "# Check every line marked CONFIRM, then run:",
        "#   harness probe --config probe.yaml --upstream HOST:PORT",
        "# docs/probe.md explains every key.",
        "profile: ietf                   # expected codes: ietf (400/422/409) or conflict-409",
        "endpoints:",
    ]
    for endpoint in endpoints:
        lines += [
            f"  - name: {_flow(endpoint.name)}",
            f"    method: {endpoint.method}",
            f"    path: {_flow(endpoint.path)}",
            "    # The body from the request schema: {uuid}, {int:A-B}, {choice:a|b} are fresh per request.",
            f"    body: {_flow(endpoint.body)}",
            *([f"    mutate: {_flow(endpoint.mutate)}   # no generated field: the payload mismatch changes this one"]
              if endpoint.mutate else []),
            f"    requires_key: {'true' if endpoint.requires_key else 'false'}"
            + ("" if endpoint.requires_key else "   # the Idempotency-Key header is optional in the document"),
            f"    id: {{pointer: {endpoint.id_pointer}}}"
            + ("   # CONFIRM: no `id` in the 2xx answer's schema; where does the answer name the resource?"
               if endpoint.id_guessed else ""),
        ]
        if endpoint.read_path:
            lines.append(f"    read: {{path: {_flow(endpoint.read_path)}}}   # CONFIRM: guessed from a GET operation")
        else:
            lines.append("    # read: {path: /things/{id}}   # no GET <path>/{id} found: add the read-back path")
        if endpoint.search_path:
            lines.append(f"    search: {{path: {_flow(endpoint.search_path)}, items: /items}}"
                         "   # CONFIRM: guessed; `items` points at the list in the answer")
        if endpoint.expect:
            lines.append("    expect:                        # the codes the document gives: always checked")
            for misuse, (code, description) in endpoint.expect.items():
                lines.append(f"      {misuse}: {code}   # documented: {code} {_one_line(description)}")
        else:
            lines.append("    # expect: no documented response for a missing key, a reused key or one in flight:"
                         " the profile's codes apply, as advice")
    lines += [
        "load: {users: 8, duration: 5s, seed: 7}",
        "# plan: flaky-network          # faults between the probe and the service (docs/probe.md)",
        "",
    ]
    return "\n".join(lines)
