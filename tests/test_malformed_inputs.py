"""Every file a user hands the harness is read or refused with the harness's own error.

The readers: the probe config (`harness probe --config`), a fault plan (`harness run
--plan`, `harness probe`'s plan), a compose file, a stack's state.json and settings,
the registry's entries, the provider's ledger, a run directory given to `harness
check` (settings.json, export.ndjson, faults.jsonl, the history lines) and history
lines on their own. Hypothesis hands each one malformed documents: a
valid document with one value somewhere replaced by a value of any shape (or
removed), random values, random bytes; explicit examples add the cases a generator
rarely reaches: 5,000 levels of nesting, a 5,000-digit integer, an alias inside its
own anchor, an alias bomb, an empty file, a directory. Each reader either returns or
raises its HarnessError subclass; through `harness.cli.main.main` that is exit 2 and
one line on stderr.
"""

from __future__ import annotations

import copy
import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from harness.bundled import plans_dir
from harness.cli.main import main
from harness.documents import MAX_DEPTH, check_shape, parse_json, parse_yaml
from harness.errors import HarnessError
from harness.exit_codes import EXIT_HARNESS
from harness.history import HistoryError, read_pairs, read_records
from harness.nemesis.plans import PlanError, load_plan
from harness.probe.config import ProbeConfigError, load_config
from harness.probe.plan_targets import ProbeTargets, load_probe_plan
from harness.provider.errors import ProviderError
from harness.provider.records import read_ledger
from harness.run.rundir import RunDir, RunDirError
from harness.stack import registry
from harness.stack.compose import load_compose
from harness.stack.info import STATE_FILE, StackError, read_info
from harness.stack.settings import SETTINGS_FILE, read_settings, write_settings
from tests.cli.saved_runs import saved_run
from tests.support.stacks import sample_info, small_settings

ROOT = Path(__file__).resolve().parents[1]
DEEP = 5_000
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# Documents that crashed a reader before it had one place to read them.
DEEP_LIST_YAML = "a: " + "[" * DEEP + "]" * DEEP + "\n"
DEEP_MAP_YAML = "a: " + "{a: " * DEEP + "1" + "}" * DEEP + "\n"
DEEP_BLOCK_YAML = "".join("  " * level + "a:\n" for level in range(DEEP))
DEEP_JSON = "[" * DEEP * 20 + "]" * DEEP * 20
HUGE_INT_YAML = "seed: " + "9" * DEEP + "\n"
SELF_ALIAS_YAML = "seed: 1\nwindows: &w [*w]\n"
ALIAS_BOMB_YAML = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(6))
SPECIAL_TEXTS = [DEEP_LIST_YAML, DEEP_MAP_YAML, DEEP_BLOCK_YAML, HUGE_INT_YAML, SELF_ALIAS_YAML,
                 ALIAS_BOMB_YAML, "", "\x00", "[", "{a: 1", "- - -\n  :", "!!python/object:os.system {}\n",
                 "a: !!binary =\n", "d: 2024-13-45\n", DEEP_JSON]
SPECIAL_BYTES = [b"\xff\xfe\x00garbage\x80", b"\xc3", b"\xef\xbb\xbf{}", b"\x00" * 10]

# --- generated documents --------------------------------------------------------------

SCALARS = (st.none() | st.booleans() | st.integers() | st.integers(min_value=10**300, max_value=10**400)
           | st.floats() | st.text(max_size=12) | st.sampled_from(["", "1s", "-1s", "{uuid}", "/id", "app", "{int:9-1}"]))
VALUES = st.recursive(SCALARS, lambda children: st.lists(children, max_size=4)
                      | st.dictionaries(st.text(max_size=8), children, max_size=4), max_leaves=16)


@st.composite
def mutated(draw: st.DrawFn, document: Any) -> Any:
    """`document` with one value, at a path Hypothesis picks, replaced or removed."""
    copied = copy.deepcopy(document)
    parent: Any = None
    key: Any = None
    node = copied
    while isinstance(node, (dict, list)) and node and draw(st.integers(0, 4)) > 0:
        key = draw(st.sampled_from(list(node) if isinstance(node, dict) else list(range(len(node)))))
        parent, node = node, node[key]
    if parent is None:
        return draw(VALUES)
    if draw(st.integers(0, 4)) == 0:
        del parent[key]
    else:
        parent[key] = draw(VALUES)
    return copied


def _yaml_file(directory: Path, name: str) -> Any:
    return yaml.safe_load((directory / name).read_text())


PROBE_CONFIGS = [_yaml_file(ROOT / "examples", name) for name in sorted(
    path.name for path in (ROOT / "examples").glob("*.yaml"))]
PLANS = [_yaml_file(plans_dir(), path.name) for path in sorted(plans_dir().glob("*.yaml"))]


def documents(valid: list[Any]) -> st.SearchStrategy[Any]:
    return st.sampled_from(valid).flatmap(mutated) | VALUES


def yaml_text(value: Any) -> str:
    return yaml.safe_dump(value, allow_unicode=True)


def json_text(value: Any) -> str:
    return json.dumps(value)


def file_contents(valid: list[Any], dump: Callable[[Any], str]) -> st.SearchStrategy[bytes]:
    return documents(valid).map(lambda value: dump(value).encode()) | st.binary(max_size=64)


def read_or_refuse(read: Callable[[], object], error: type[HarnessError]) -> None:
    """The reader returns, or raises `error` with a message of one line."""
    try:
        read()
    except error as refused:
        message = str(refused)
        assert message.strip() and len(message.strip().splitlines()) == 1, message


def specials() -> list[bytes]:
    return [text.encode() for text in SPECIAL_TEXTS] + SPECIAL_BYTES


def with_specials(test: Callable[..., None]) -> Callable[..., None]:
    for content in specials():
        test = example(content=content)(test)
    return test


# --- the readers ------------------------------------------------------------------------

@FUZZ
@given(content=file_contents(PROBE_CONFIGS, yaml_text))
@with_specials
def test_the_probe_config_is_read_or_refused(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "probe.yaml"
    path.write_bytes(content)
    read_or_refuse(lambda: load_config(path), ProbeConfigError)


@FUZZ
@given(content=file_contents(PLANS, yaml_text))
@with_specials
def test_a_plan_is_read_or_refused(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "plan.yaml"
    path.write_bytes(content)
    read_or_refuse(lambda: load_plan(path), PlanError)


@FUZZ
@given(content=file_contents(PLANS, yaml_text))
@with_specials
def test_a_probe_plan_is_read_or_refused(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "plan.yaml"
    path.write_bytes(content)
    targets = ProbeTargets.plain(("db",), service=True, brokers=("rabbitmq",))
    read_or_refuse(lambda: load_probe_plan(path, targets), PlanError)


@FUZZ
@given(content=file_contents([_yaml_file(ROOT, "docker-compose.yml")], yaml_text))
@with_specials
def test_a_compose_file_is_read_or_refused(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "docker-compose.yml"
    path.write_bytes(content)
    read_or_refuse(lambda: load_compose(path), StackError)


@FUZZ
@given(content=file_contents([sample_info().to_json(), sample_info(mode="compose").to_json()], json_text))
@with_specials
def test_a_state_file_is_read_or_refused(tmp_path: Path, content: bytes) -> None:
    (tmp_path / STATE_FILE).write_bytes(content)
    read_or_refuse(lambda: read_info(tmp_path), StackError)


HISTORY_LINES = [
    {"type": "invoke", "op_id": "w-1-1", "op": "create_order", "process": "w-1", "time": 1.0,
     "idempotency_key": "k", "sku": "sku-1", "quantity": 1, "amount_cents": 500, "tenant": "default"},
    {"type": "ok", "op_id": "w-1-1", "op": "create_order", "time": 2.0, "status": 201, "order_id": "o-1",
     "replayed": False, "body_digest": "d", "answer": {"order_id": "o-1", "amount_cents": 500}},
]


@FUZZ
@given(lines=st.lists(documents(HISTORY_LINES).map(json_text).map(str.encode) | st.binary(max_size=32),
                      min_size=1, max_size=4), torn=st.booleans())
@example(lines=[DEEP_JSON.encode()], torn=False)
@example(lines=[b'{"type": "invoke", "op_id": ' + b"[" * 900 + b"]" * 900 + b"}"], torn=False)
@example(lines=[b'{"type": "invoke", "op_id": ["x"]}', b'{"type": "ok", "op_id": ["x"]}'], torn=False)
@example(lines=[b'{"type": "invoke", "op_id": "a", "amount_cents": ' + b"9" * DEEP + b"}"], torn=False)
def test_history_lines_are_read_or_refused(tmp_path: Path, lines: list[bytes], torn: bool) -> None:
    path = tmp_path / "w.jsonl"
    path.write_bytes(b"\n".join(lines) + (b"" if torn else b"\n"))
    read_or_refuse(lambda: list(read_pairs([path])), HistoryError)
    read_or_refuse(lambda: list(read_records([path])), HistoryError)


@FUZZ
@given(settings_json=file_contents([{"scenario": "timeout_replay", "users": 2, "seed": 7, "duration": 5.0}],
                                   json_text),
       faults=file_contents([{"kind": "toxic", "proxy": "app", "at": 1.0, "event": "add"}], json_text))
def test_a_run_directory_is_read_or_refused(tmp_path: Path, settings_json: bytes, faults: bytes) -> None:
    run = RunDir(tmp_path)
    run.settings.write_bytes(settings_json)
    run.faults.write_bytes(faults + b"\n")
    run.interrupted.write_bytes(settings_json)
    read_or_refuse(run.read_settings, RunDirError)
    read_or_refuse(run.read_faults, RunDirError)
    run.interrupted_marker()  # best effort: never raises
    run.read_faults(strict=False)


LEDGER_LINES = [
    {"amount": 1250, "amount_captured": 1250, "amount_refunded": 0, "created": 1796647742, "currency": "eur",
     "failure_code": None, "id": "ch_1", "metadata": {"order_id": "o-1"}, "payment_intent": "pi_1",
     "payment_method": "pm_card_visa", "record": "charge", "state": "succeeded",
     "request": {"idempotency_key": "k-1", "key_scope": "sk", "method": "POST", "path": "/v1/payment_intents",
                 "request_id": "req_1", "time": 1796647742.4}},
    {"fault": None, "idempotency_key": "k-1", "key_scope": "sk", "method": "POST",
     "operation": "payment_intents.create", "path": "/v1/payment_intents", "record": "request",
     "replayed": False, "request_id": "req_1", "status": 200, "time": 1796647742.4},
]


@FUZZ
@given(content=file_contents(LEDGER_LINES, json_text))
@with_specials
def test_a_provider_ledger_is_read_or_refused(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "ledger.ndjson"
    path.write_bytes(content + b"\n" + json_text(LEDGER_LINES[1]).encode() + b"\n")
    read_or_refuse(lambda: read_ledger(path), ProviderError)


@FUZZ
@given(content=file_contents([{"root": "/tmp/h", "pid": 7, "owner": "up", "started": 1.0}], json_text))
@with_specials
def test_a_registry_entry_is_read_or_skipped(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "entry.json"
    path.write_bytes(content)
    registry._read_json(path)  # an entry it cannot read is none of its own: None, never an exception


def _written_settings() -> Any:
    with tempfile.TemporaryDirectory() as folder:
        write_settings(small_settings(Path(folder)))
        return json.loads((Path(folder) / SETTINGS_FILE).read_text())


@FUZZ
@given(content=file_contents([_written_settings()], json_text))
@with_specials
def test_the_stack_settings_are_read_or_refused(tmp_path: Path, content: bytes) -> None:
    (tmp_path / SETTINGS_FILE).write_bytes(content)
    read_or_refuse(lambda: read_settings(tmp_path, {}), StackError)


@pytest.mark.parametrize(("read", "error"), [(load_config, ProbeConfigError), (load_plan, PlanError),
                                             (load_compose, StackError)])
def test_a_directory_is_not_a_file(tmp_path: Path, read: Callable[[Path], object],
                                   error: type[HarnessError]) -> None:
    with pytest.raises(error, match="cannot read .*: Is a directory$"):
        read(tmp_path)


def test_a_state_file_that_is_a_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / STATE_FILE).mkdir()
    with pytest.raises(StackError, match="unreadable stack state"):
        read_info(tmp_path)


# --- the shared reader -------------------------------------------------------------------

@pytest.mark.parametrize("text", [DEEP_LIST_YAML, DEEP_MAP_YAML, DEEP_BLOCK_YAML])
def test_deep_yaml_is_refused_before_pyyaml_recurses(text: str) -> None:
    with pytest.raises(PlanError, match=f"nested deeper than {MAX_DEPTH} levels"):
        parse_yaml(text, source="p.yaml", error=PlanError)


def test_nesting_up_to_the_bound_is_read() -> None:
    depth = MAX_DEPTH - 1  # the top mapping is a level too
    assert parse_yaml("a: " + "[" * (depth - 1) + "]" * (depth - 1), source="p", error=PlanError) is not None
    assert parse_json("[" * MAX_DEPTH + "]" * MAX_DEPTH, source="s.json", error=StackError) is not None


def test_aliases_are_read_and_bombs_are_refused() -> None:
    shared = parse_yaml("base: &b {x: 1}\nfirst: *b\nsecond: {<<: *b, y: 2}\n", source="c", error=StackError)
    assert shared == {"base": {"x": 1}, "first": {"x": 1}, "second": {"x": 1, "y": 2}}
    with pytest.raises(StackError, match="values once its aliases are expanded"):
        parse_yaml(ALIAS_BOMB_YAML, source="c", error=StackError)
    with pytest.raises(PlanError, match="contains itself"):
        parse_yaml(SELF_ALIAS_YAML, source="p", error=PlanError)


def test_aliases_cannot_nest_past_the_bound() -> None:
    # 20 levels written, each alias of the one above: 20 * 20 levels once expanded.
    lines = ["l0: &l0 " + "[" * 19 + "]" * 19]
    lines += [f"l{i}: &l{i} " + "[" * 19 + f"*l{i - 1}" + "]" * 19 for i in range(1, 20)]
    with pytest.raises(PlanError, match="once its aliases are expanded"):
        parse_yaml("\n".join(lines) + "\n", source="p", error=PlanError)


def test_a_value_built_in_code_is_checked_the_same_way() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(StackError, match="contains itself"):
        check_shape({"a": loop}, source="x", error=StackError)


# --- through the command line ----------------------------------------------------------

def _one_line_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code = main(argv)
    captured = capsys.readouterr()
    assert code == EXIT_HARNESS, captured
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("harness: "), captured.err
    return lines[0]


@pytest.mark.parametrize("text", [DEEP_LIST_YAML, DEEP_MAP_YAML, HUGE_INT_YAML, SELF_ALIAS_YAML, "\x00"])
def test_harness_probe_refuses_a_malformed_config_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              text: str) -> None:
    config = tmp_path / "probe.yaml"
    config.write_text(text)
    assert str(config) in _one_line_exit_2(["probe", "--config", str(config), "--out", str(tmp_path / "out")],
                                           capsys)
    assert not (tmp_path / "out").exists()


def test_harness_probe_refuses_binary_garbage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "probe.yaml"
    config.write_bytes(b"\xff\xfe\x00garbage")
    assert "not UTF-8" in _one_line_exit_2(["probe", "--config", str(config)], capsys)


@pytest.mark.parametrize("text", [DEEP_LIST_YAML, DEEP_BLOCK_YAML, "windows: [\n  {at: 1s\n"])
def test_harness_run_refuses_a_malformed_plan_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.chdir(tmp_path)
    plan = tmp_path / "plan.yaml"
    plan.write_text(text)
    _one_line_exit_2(["run", "timeout_replay", "--plan", str(plan)], capsys)
    assert not (tmp_path / "runs").exists()


def test_harness_probe_refuses_a_malformed_plan_in_one_line(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(DEEP_LIST_YAML)
    config = tmp_path / "probe.yaml"
    config.write_text((ROOT / "examples" / "target_app_probe.yaml").read_text())
    line = _one_line_exit_2(["probe", "--config", str(config), "--upstream", "127.0.0.1:9", "--plan", str(plan)],
                           capsys)
    assert "nested deeper" in line


RUN_FILES = ["settings.json", "export.ndjson", "faults.jsonl", "histories/user1.jsonl"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(RUN_FILES), data=st.data())
def test_harness_check_reads_or_refuses_a_malformed_run_directory(
        tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str], name: str,
        data: st.DataObject) -> None:
    """One file of a saved run with one record changed (or garbage, or 5,000 levels deep):
    `harness check` gives a verdict, or exit 2 in one line."""
    run_dir = saved_run(tmp_path_factory.mktemp("check"))
    path = run_dir / name
    records = [json.loads(line) for line in path.read_text().splitlines()] or [{}]
    index = data.draw(st.integers(0, len(records) - 1))
    changed = data.draw(mutated(records[index]).map(json_text).map(str.encode)
                        | st.binary(max_size=32) | st.just(DEEP_JSON.encode()))
    lines = [json_text(record).encode() for record in records]
    lines[index] = changed
    path.write_bytes(b"\n".join(lines) + b"\n")
    code = main(["check", str(run_dir)])
    err = capsys.readouterr().err
    if code == EXIT_HARNESS:
        assert len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize(("name", "field", "value"), [
    ("export.ndjson", "id", ["order-1"]),  # an order id that is a list: no key of the checker's index
    ("export.ndjson", "tenant", True),
    ("histories/user1.jsonl", "op_id", {"a": 1}),
])
def test_harness_check_refuses_a_record_of_the_wrong_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           name: str, field: str, value: Any) -> None:
    run_dir = saved_run(tmp_path)
    path = run_dir / name
    records = [json.loads(line) for line in path.read_text().splitlines()]
    records[0][field] = value
    path.write_text("".join(json_text(record) + "\n" for record in records))
    line = _one_line_exit_2(["check", str(run_dir)], capsys)
    assert str(run_dir) in line or str(path) in line


@pytest.mark.parametrize("body", ["[" * DEEP + "]" * DEEP, "{", "9" * DEEP])
def test_harness_probe_refuses_a_malformed_body_in_one_line(capsys: pytest.CaptureFixture[str], body: str) -> None:
    line = _one_line_exit_2(["probe", "--upstream", "127.0.0.1:9", "--path", "/orders", "--body", body], capsys)
    assert "--body" in line
