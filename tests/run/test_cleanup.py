"""The runner's cleanup is unconditional and never swallows a control-plane error.

The stack, the nemesis, Locust and the run guard are fakes (no process is started):
a heal or a resume that fails must still let every other cleanup step run, be
reported on stderr and in the run directory, and end the run as a harness failure
(exit code 2 through `harness run`), never PASS.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

from harness.cli.main import main
from harness.exit_codes import EXIT_HARNESS
from harness.nemesis.toxiproxy_client import HealFailure, NemesisHealError
from harness.run import runner
from harness.run.cleanup import CleanupFailed, HealFailed
from harness.run.rundir import RunDir
from harness.run.runner import RunSpec, heal_everything
from harness.stack.info import ServiceInfo, StackError, StackInfo


def _info(root: Path) -> StackInfo:
    log = root / "app.log"
    log.write_text("app log\n")
    return StackInfo(
        mode="local", phase="running", started_at=1.0, root=str(root), app_url="http://127.0.0.1:1",
        app_direct_url="http://127.0.0.1:2", toxiproxy_url="http://127.0.0.1:3", toxiproxy_kind="embedded",
        redis_url="redis://127.0.0.1:4/0", redis_proxy_url="redis://127.0.0.1:5/0", webhook_secret="s",
        internal_token="t", stream="payments", group="target-app", proxy_prefix="", proxies={},
        owner="up", unsafe_disable=(), app_workers=1, consumers=2,
        services=(ServiceInfo("app", 10, 2, str(log), "running"),
                  ServiceInfo("consumer-1", 11, None, None, "running"),
                  ServiceInfo("consumer-2", 12, None, None, "running")))


class FakeNemesis:
    def __init__(self, stack: FakeStack) -> None:
        self.stack = stack

    def reset(self) -> None:
        self.stack.events.append("reset")
        if self.stack.resets_fail_after is not None and self.stack.resets >= self.stack.resets_fail_after:
            raise NemesisHealError([HealFailure("toxic plan_w0 on app", "500 Internal Server Error")], "reset")
        self.stack.resets += 1


class FakeStack:
    def __init__(self, root: Path) -> None:
        self._info = _info(root)
        self.root = root
        self.events: list[str] = []
        self.resets = 0
        self.resets_fail_after: int | None = None
        self.failing_resume: set[str] = set()

    @property
    def info(self) -> StackInfo:
        return self._info

    @property
    def state(self) -> dict[str, Any]:
        return self._info.to_json()

    def nemesis(self, recorder: object = None) -> FakeNemesis:
        return FakeNemesis(self)

    def services(self) -> list[dict[str, Any]]:
        return [{"name": s.name, "pid": s.pid, "port": s.port, "log": s.log, "status": "running",
                 "healthy": True} for s in self._info.services]

    def health(self) -> dict[str, bool]:
        return {service.name: True for service in self._info.services}

    def pause(self, service: str) -> None:
        self.events.append(f"pause {service}")

    def resume(self, service: str) -> None:
        self.events.append(f"resume {service}")
        if service in self.failing_resume:
            raise StackError(f"{service} did not resume")

    def kill(self, service: str) -> None: ...

    def start(self, service: str) -> None: ...

    def restart(self, service: str) -> None: ...

    def down(self) -> None:
        self.events.append("down")


class FakeLocust:
    returncode: int | None = 0

    def __init__(self, stack: FakeStack, **_: object) -> None:
        self.stack = stack
        self.log_path = Path("locust.log")

    def start(self) -> None:
        self.stack.events.append("load started")

    def finished(self, *, timeout: float) -> bool:
        return True

    def stop(self) -> None:
        self.stack.events.append("load stopped")


class FakeGuard:
    lifeline = None
    short_id = "abc123"

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir

    def __enter__(self) -> FakeGuard:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        return None

    def leave(self) -> None:
        return None

    def on_interrupt(self, *actions: object) -> Any:
        return lambda *exc: False

    def processes_of(self, stack: FakeStack) -> FakeStack:
        return stack


@pytest.fixture
def fake_stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeStack]:
    stack = FakeStack(tmp_path)

    def export(url: str, destination: Path, *, token: str | None = None, timeout: float = 60.0) -> int:
        stack.events.append(f"export {destination.name}")
        destination.write_text('{"kind": "counters"}\n')
        return 1

    @contextmanager
    def stack_for(spec: RunSpec, run_dir: RunDir, *, out: object, guard: object,
                  cleanup: Any, fake_clocks: tuple[str, ...] = ()) -> Iterator[tuple[FakeStack, bool]]:
        assert fake_clocks == (), "no plan these tests use moves a clock"
        # a stack of the run's own: stopped as a cleanup step, like the real one
        with ExitStack() as owned:
            owned.callback(cleanup.step("stop the run's stack", stack.down))
            yield stack, False

    monkeypatch.setattr(runner, "_stack_for", stack_for)
    monkeypatch.setattr(runner, "RunGuard", FakeGuard)
    monkeypatch.setattr(runner, "LocustProcess", lambda **kwargs: FakeLocust(stack))
    monkeypatch.setattr(runner, "export_state", export)
    monkeypatch.setattr(runner, "wait_for_drain", lambda *args, **kwargs: None)
    monkeypatch.setattr(runner, "read_orders", lambda *args, **kwargs: 0)
    monkeypatch.setattr(runner, "SETTLE_SECONDS", 0.0)
    yield stack


def _spec(tmp_path: Path) -> RunSpec:
    return RunSpec(scenario="mixed", duration=1.0, runs_root=tmp_path / "runs", progress=False,
                   attach=False, run_id="r1")


def test_a_heal_that_fails_still_runs_every_other_step_and_is_a_harness_failure(
        fake_stack: FakeStack, tmp_path: Path) -> None:
    fake_stack.resets_fail_after = 1  # the heal before the load works; the one after it fails
    err = io.StringIO()
    with pytest.raises(CleanupFailed, match="heal every fault.*toxic plan_w0 on app"):
        runner.run(_spec(tmp_path), out=err)
    events = fake_stack.events
    # the load and the nemesis stopped before the heal was tried, the stack stopped after it
    assert events.index("load stopped") < events.index("reset", 1) < events.index("down")
    assert "export export.ndjson" not in events  # never judged on a stack still faulted
    assert "harness: cleanup: heal every fault failed: " in err.getvalue()
    [failure] = RunDir(tmp_path / "runs" / "r1").read_cleanup_errors()
    assert failure.step == "heal every fault" and "toxic plan_w0 on app" in failure.error
    assert not (tmp_path / "runs" / "r1" / "result.json").exists()  # no verdict, let alone PASS


def test_through_the_cli_an_unhealed_fault_exits_2(fake_stack: FakeStack, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    fake_stack.resets_fail_after = 1
    code = main(["run", "mixed", "--duration", "1s", "--runs-dir", str(tmp_path / "runs")])
    assert code == EXIT_HARNESS
    assert "harness: cleanup failed (heal every fault: " in capsys.readouterr().err
    assert "down" in fake_stack.events


def test_a_consumer_that_does_not_resume_does_not_keep_the_others_paused(
        fake_stack: FakeStack, tmp_path: Path) -> None:
    fake_stack.failing_resume = {"consumer-1"}
    err = io.StringIO()
    with pytest.raises(CleanupFailed, match="resume consumer-1"):
        runner.run(_spec(tmp_path), out=err)
    events = fake_stack.events
    assert "resume consumer-2" in events and "resume consumer-1" in events
    assert events[-1] == "down"
    assert "harness: cleanup: resume consumer-1 failed: consumer-1 did not resume" in err.getvalue()
    assert [f.step for f in RunDir(tmp_path / "runs" / "r1").read_cleanup_errors()] == ["resume consumer-1"]


def test_heal_everything_tries_every_step_and_raises_all_failures(tmp_path: Path) -> None:
    stack = FakeStack(tmp_path)
    stack.resets_fail_after = 0
    stack.failing_resume = {"consumer-2"}
    stack.services = lambda: [{"name": "consumer-2", "status": "paused"}]  # type: ignore[method-assign]
    with pytest.raises(HealFailed) as raised:
        heal_everything(stack.nemesis(), stack)  # type: ignore[arg-type]
    assert len(raised.value.failures) == 2
    assert "could not reset Toxiproxy" in raised.value.failures[0]
    assert "consumer-2 could not be resumed" in raised.value.failures[1]


def test_a_service_that_cannot_start_again_is_reported_with_the_services_down_on_their_own(
        tmp_path: Path) -> None:
    """An app stays unhealthy while its Redis is dead: the heal names both, the cause too."""
    stack = FakeStack(tmp_path)
    stack.services = lambda: [{"name": "app", "status": "running"},  # type: ignore[method-assign]
                              {"name": "redis", "status": "exited"}]
    stack.health = lambda: {"app": False}  # type: ignore[method-assign]

    def refuse(service: str) -> None:
        raise StackError(f"{service} not healthy after 30s")

    stack.start = refuse  # type: ignore[method-assign]
    with pytest.raises(HealFailed) as raised:
        heal_everything(stack.nemesis(), stack)  # type: ignore[arg-type]
    assert list(raised.value.failures) == ["service app did not come back: app not healthy after 30s",
                                           "down on their own: redis (exited)"]


def test_a_window_whose_heal_failed_during_the_run_is_reported_and_fails_the_run(
        fake_stack: FakeStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.nemesis.runner import FaultFailure, NemesisReport

    class HealFailingRunner:
        failure: str | None = None

        def __init__(self, *args: object, **options: object) -> None: ...

        def start(self, windows: object, **options: object) -> None: ...

        def stop(self) -> None:
            fake_stack.events.append("nemesis stopped")

        def active(self) -> list[str]:
            return []

        def report(self) -> NemesisReport:
            return NemesisReport(failures=(FaultFailure("kill_consumer_1", "heal", "start refused"),))

    monkeypatch.setattr(runner, "NemesisRunner", HealFailingRunner)
    err = io.StringIO()
    with pytest.raises(CleanupFailed, match="heal kill_consumer_1: start refused"):
        runner.run(_spec(tmp_path), out=err)
    assert "harness: cleanup: heal kill_consumer_1 failed: start refused" in err.getvalue()
    assert fake_stack.events.index("nemesis stopped") < fake_stack.events.index("down")
    assert "export export.ndjson" not in fake_stack.events
