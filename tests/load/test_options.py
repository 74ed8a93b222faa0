"""The load settings as Locust options: environment fallback, a running stack's state
as the default for what is not given, web UI flags, values Locust can send to workers.

Locust monkey-patches the process that imports it, so what needs Locust's own parser
runs in a subprocess; `harness.load.settings` itself imports no Locust.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgpack
import pytest

from harness.load.settings import (
    DEFAULT_THINK_TIME,
    OPTIONS,
    LoadConfigError,
    LoadSettings,
    add_options,
    format_think_time,
    load_environment,
    parse_think_time,
)
from harness.stack.info import StackInfo

REPO = Path(__file__).resolve().parents[2]


def parse(argv: list[str], environ: dict[str, str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_options(parser, environ)
    return parser.parse_args(argv)


def stack_info(root: Path, **overrides: Any) -> StackInfo:
    """A local stack's state as its supervisor writes it; `overrides` replace fields."""
    info = StackInfo(
        mode="local", phase="running", started_at=1.0, root=str(root),
        app_url="http://127.0.0.1:1111", app_direct_url="http://127.0.0.1:1112",
        toxiproxy_url="http://127.0.0.1:3333", toxiproxy_kind="embedded",
        redis_url="redis://127.0.0.1:2222/0", redis_proxy_url="redis://127.0.0.1:2223/0",
        webhook_secret="stack-secret", internal_token="token", stream="stack-stream", group="target-app",
        proxy_prefix="p-", proxies={"app": "p-app", "redis": "p-redis"}, owner="up", unsafe_disable=(),
        app_workers=1, consumers=1, supervisor_pid=os.getpid(), control_socket=str(root / "control.sock"),
    )
    return replace(info, **overrides)


def write_state(root: Path, **overrides: Any) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "state.json").write_text(json.dumps(stack_info(root, **overrides).to_json()))


def test_command_line_beats_environment_beats_builtin_default() -> None:
    env = {"HARNESS_SEED": "5", "HARNESS_SKUS": "a,b", "HARNESS_FRESH_CONNECTIONS": "0",
           "TARGET_APP_WEBHOOK_SECRET": "from-app-env"}
    settings = LoadSettings.from_options(parse(["--harness-seed", "9", "--harness-root", ""], env))
    assert (settings.seed, settings.skus, settings.fresh_connections) == (9, ("a", "b"), False)
    assert settings.webhook_secret == "from-app-env"  # the app's variable still works
    env["HARNESS_WEBHOOK_SECRET"] = "from-harness-env"
    assert LoadSettings.from_options(parse(["--harness-root", ""], env)).webhook_secret == "from-harness-env"
    plain = LoadSettings.from_options(parse(["--harness-root", ""], {}))
    assert plain == LoadSettings()  # nothing given, no stack: the built-in defaults


def test_a_running_stack_fills_what_was_not_given(tmp_path: Path) -> None:
    write_state(tmp_path / ".harness")
    options = parse(["--harness-root", str(tmp_path / ".harness"), "--harness-stream", "mine"], {})
    settings = LoadSettings.from_options(options)
    assert settings.stack_root == (tmp_path / ".harness").resolve()
    assert (settings.redis_url, settings.webhook_secret, settings.toxiproxy_url) == (
        "redis://127.0.0.1:2222/0", "stack-secret", "http://127.0.0.1:3333")
    assert settings.stream == "mine"  # given beats the stack
    assert settings.host == "http://127.0.0.1:1111"
    assert settings.history_dir is None  # chosen once by the Locust process, not here


def test_the_default_root_is_under_the_current_directory(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    write_state(tmp_path / ".harness")
    monkeypatch.chdir(tmp_path)
    assert LoadSettings.from_options(parse([], {})).webhook_secret == "stack-secret"
    assert LoadSettings.from_options(parse([], {"HARNESS_ROOT": ""})).webhook_secret == "dev-webhook-secret"


def test_a_stale_state_file_is_not_a_stack(tmp_path: Path) -> None:
    write_state(tmp_path, supervisor_pid=2**22 + 12345)  # above pid_max: never alive
    settings = LoadSettings.from_options(parse(["--harness-root", str(tmp_path)], {}))
    assert settings.stack_root is None and settings.redis_url is None


def test_web_form_strings_are_converted_and_bad_values_are_one_line_errors() -> None:
    form = {"harness_root": "", "harness_seed": "12", "harness_request_timeout": "0.5",
            "harness_fresh_connections": "false", "harness_skus": " x , y "}
    settings = LoadSettings.from_options(form)
    assert (settings.seed, settings.request_timeout, settings.fresh_connections, settings.skus) == (
        12, 0.5, False, ("x", "y"))
    for bad in ({"harness_request_timeout": "soon"}, {"harness_request_timeout": "0"},
                {"harness_skus": " , "}, {"harness_fresh_connections": "maybe"}):
        with pytest.raises(LoadConfigError, match="--harness-"):
            LoadSettings.from_options({"harness_root": "", **bad})
    with pytest.raises(SystemExit):  # argparse reports a bad environment value itself
        parse([], {"HARNESS_SEED": "seven"})


def test_resolved_settings_travel_as_plain_values(tmp_path: Path) -> None:
    write_state(tmp_path)
    settings = LoadSettings.from_options({"harness_root": str(tmp_path), "harness_history_dir": "/r/h"})
    options = settings.to_options()
    assert set(options) == {spec.dest for spec in OPTIONS}
    assert msgpack.loads(msgpack.dumps(options)) == options  # what Locust's spawn message carries
    again = LoadSettings.from_options(options)
    assert again == settings  # a worker reads the master's values back unchanged


def test_locust_shows_every_option_in_the_web_ui_and_masks_the_secret() -> None:
    code = (
        "from locust.argument_parser import get_empty_argument_parser\n"
        "from harness.load.settings import add_options\n"
        "parser = get_empty_argument_parser()\n"
        "add_options(parser, {})\n"
        "import json\n"
        "print(json.dumps([sorted(k for k in parser.args_included_in_web_ui if k.startswith('harness_')),\n"
        "                  sorted(parser.secret_args_included_in_web_ui)]))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                            timeout=60, check=True)
    shown, secret = json.loads(result.stdout)
    assert shown == sorted(spec.dest for spec in OPTIONS)
    assert secret == ["harness_webhook_secret"]


def test_a_state_file_that_is_not_a_stacks_is_one_clear_error(tmp_path: Path) -> None:
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "state.json").write_text(json.dumps({"app_url": "http://127.0.0.1:1111"}))
    with pytest.raises(LoadConfigError, match="state.json"):
        LoadSettings.from_options({"harness_root": str(tmp_path)})


def test_the_environment_for_a_stack_names_its_values_and_reads_no_other_stack(tmp_path: Path) -> None:
    info = stack_info(tmp_path)
    env = load_environment(info, seed=3, history_dir=tmp_path / "h")
    assert env["HARNESS_ROOT"] == "" and env["HARNESS_SEED"] == "3"
    assert (env["HARNESS_REDIS_URL"], env["HARNESS_STREAM"], env["TARGET_APP_WEBHOOK_SECRET"]) == (
        info.redis_url, "stack-stream", "stack-secret")
    assert env["HARNESS_HISTORY_DIR"] == str((tmp_path / "h").resolve())
    settings = LoadSettings.from_env(env)
    assert (settings.redis_url, settings.stream, settings.webhook_secret, settings.seed, settings.stack_root) == (
        info.redis_url, "stack-stream", "stack-secret", 3, None)


def test_every_option_and_its_variables_are_in_the_scenarios_doc() -> None:
    text = (REPO / "docs" / "scenarios.md").read_text()
    rows = {line.split("|")[1].strip(" `"): line for line in text.splitlines() if line.startswith("| `--harness-")}
    assert sorted(rows) == sorted(spec.flag for spec in OPTIONS)
    for spec in OPTIONS:
        assert all(f"`{name}`" in rows[spec.flag] for name in spec.env), spec.flag


@pytest.mark.parametrize(("text", "expected"), [
    ("", DEFAULT_THINK_TIME), ("0.1-0.2", (0.1, 0.2)), ("100ms-250ms", (0.1, 0.25)),
    ("0.3", (0.3, 0.3)), (" 1s - 2s ", (1.0, 2.0)), ("0-0", (0.0, 0.0)),
])
def test_think_time_reads_a_range_or_one_duration(text: str, expected: tuple[float, float]) -> None:
    assert parse_think_time(text) == pytest.approx(expected)
    assert parse_think_time(format_think_time(parse_think_time(text))) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["soon", "0.2-0.1", "0.1-", "-0.1", "1-2-3"])
def test_a_bad_think_time_is_one_line_naming_the_option(text: str) -> None:
    with pytest.raises(LoadConfigError) as caught:
        parse_think_time(text)
    assert str(caught.value).startswith("--harness-think-time: ") and "\n" not in str(caught.value)


def test_think_time_comes_from_the_option_or_its_variable_and_travels_to_workers() -> None:
    assert LoadSettings.from_options(parse(["--harness-root", ""], {})).think_time == DEFAULT_THINK_TIME
    from_env = LoadSettings.from_options(parse(["--harness-root", ""], {"HARNESS_THINK_TIME": "0.1-0.2"}))
    assert from_env.think_time == pytest.approx((0.1, 0.2))
    given = LoadSettings.from_options(parse(["--harness-root", "", "--harness-think-time", "0.5"],
                                            {"HARNESS_THINK_TIME": "0.1-0.2"}))
    assert given.think_time == (0.5, 0.5)
    # What a master sends its workers reads back the same.
    options = msgpack.unpackb(msgpack.packb(given.to_options()))
    assert LoadSettings.from_options(options, discover=False).think_time == (0.5, 0.5)


def test_each_user_waits_the_think_time_it_was_given() -> None:
    # In a subprocess: Locust monkey-patches the process that imports it.
    script = (
        "import json\n"
        "from locust.env import Environment\n"
        "from harness.load import recording\n"
        "from harness.load.settings import LoadSettings\n"
        "from harness.locustfiles.timeout_replay import TimeoutReplayUser\n"
        "env = Environment(user_classes=[TimeoutReplayUser])\n"
        "setattr(env, recording._ATTRIBUTE, recording.LoadProcess(env, LoadSettings(think_time=(0.3, 0.4))))\n"
        "user = TimeoutReplayUser(env)\n"
        "print(json.dumps([user.wait_time() for _ in range(200)]))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                            cwd=REPO, env={**os.environ, "HARNESS_ROOT": ""})
    assert result.returncode == 0, result.stderr[-2000:]
    waits = json.loads(result.stdout.strip().splitlines()[-1])
    assert all(0.3 <= wait <= 0.4 for wait in waits)
    assert max(waits) - min(waits) > 0.05  # drawn, not one fixed value
