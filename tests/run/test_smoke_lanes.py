"""The smoke job's lanes, without a stack: how steps are put on lanes, when a lane
restarts its app, and that every stack a lane started is stopped however the lane
ends (a harness failure, a stack that will not restart, Ctrl-C), with the job's exit
code saying so when one would not stop. The stack and the runs are fakes here;
tests/run/test_smoke_lanes_stack.py runs a lane on a real stack."""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from harness.check.checker import CheckResult, InvariantResult
from harness.errors import HarnessError
from harness.exit_codes import EXIT_HARNESS, EXIT_INCONCLUSIVE, EXIT_OK, EXIT_VIOLATION
from harness.names import ENV_APP_UNSAFE_DISABLE
from harness.run import smoke
from harness.run.runner import RunOutcome, RunSpec
from harness.run.smoke import SmokeStep, plan_lanes, run_lane, smoke_exit_code, smoke_specs, stack_key
from harness.stack.info import StackError


@dataclass
class FakeStack:
    root: Path
    env: dict[str, str]
    restarts: list[tuple[dict[str, str], int | None, bool]] = field(default_factory=list)
    stopped: bool = False
    fail_restart: bool = False
    fail_down: bool = False

    def restart_services(self, env: Mapping[str, str], *, app_workers: int | None = None,
                         flush_data: bool = False) -> None:
        if self.fail_restart:
            raise StackError("app exited with code 3")
        self.restarts.append((dict(env), app_workers, flush_data))

    def down(self) -> None:
        self.stopped = True
        if self.fail_down:
            raise StackError("still there after down: pid 4242")


@dataclass
class Fakes:
    stacks: list[FakeStack] = field(default_factory=list)
    runs: list[RunSpec] = field(default_factory=list)
    # what the n-th run does: "pass" (a control: not caught), "violation", "inconclusive",
    # "harness" (HarnessError) or "interrupt"
    behaviour: dict[int, str] = field(default_factory=dict)
    fail_restart: bool = False
    fail_down: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> Fakes:
    state = Fakes()

    @contextmanager
    def lane_stack(root: Path, spec: RunSpec, *, proxy_prefix: str) -> Iterator[FakeStack]:
        stack = FakeStack(root, smoke.app_environment(spec), fail_restart=state.fail_restart,
                          fail_down=state.fail_down)
        with state.lock:
            state.stacks.append(stack)
        try:
            yield stack
        finally:
            stack.down()

    def fake_run(spec: RunSpec, *, out: Any = None) -> RunOutcome:
        with state.lock:
            number = len(state.runs)
            state.runs.append(spec)
        what = state.behaviour.get(number, "violation" if spec.unsafe_disable else "pass")
        time.sleep(0.05)  # a run takes time: the lanes' steps interleave as real ones do
        if what == "harness":
            raise HarnessError("the consumers did not drain the stream")
        if what == "interrupt":
            raise KeyboardInterrupt
        check = CheckResult(valid=what == "pass", invariants=[])
        if what == "violation" and spec.unsafe_disable:
            invariant = next(case.invariant for case in smoke.MUTANT_CASES if case.mutant == spec.unsafe_disable[0])
            check.invariants.append(InvariantResult(invariant, invariant, passed=False, checked=1,
                                                    violation_count=1))
        code = {"pass": EXIT_OK, "inconclusive": EXIT_INCONCLUSIVE}.get(what, EXIT_VIOLATION)
        return RunOutcome(Path(spec.runs_root) / str(spec.run_id), code, what, check)

    monkeypatch.setattr(smoke, "lane_stack", lane_stack)
    monkeypatch.setattr(smoke, "run", fake_run)
    return state


def _specs(tmp_path: Path) -> list[smoke.SmokeSpec]:
    return smoke_specs(RunSpec(scenario="mixed", users=4, duration=3.0, app_workers=4, runs_root=tmp_path))


def _lane(specs: list[smoke.SmokeSpec], steps: list[int], tmp_path: Path) -> dict[int, SmokeStep]:
    done: dict[int, SmokeStep] = {}
    run_lane(tmp_path / "lane", steps, specs, done, out=io.StringIO(), lock=threading.Lock(),
             stopping=threading.Event())
    return done


def test_every_step_is_on_one_lane_and_the_correct_runs_need_no_restart(tmp_path: Path) -> None:
    specs = [spec for _, spec, _, _ in _specs(tmp_path)]
    correct = {index for index, (_, _, expect, _) in enumerate(_specs(tmp_path)) if not expect}
    assert len({stack_key(specs[index]) for index in correct}) == 1  # one configuration
    assert len({stack_key(spec) for spec in specs}) == len(smoke.MUTANT_CASES) + 1  # and one per control
    for lanes in (1, 2, 4, 6, 40):
        plan = plan_lanes(specs, lanes)
        assert 1 <= len(plan) <= lanes and all(plan)
        assert sorted(index for lane in plan for index in lane) == list(range(len(specs)))
        for lane in plan:
            # one restart per configuration a lane holds, none back to an earlier one:
            # the correct runs of a lane follow one another on its stack as it is
            changes = sum(1 for before, after in zip(lane, lane[1:], strict=False)
                          if stack_key(specs[before]) != stack_key(specs[after]))
            assert changes == len({stack_key(specs[index]) for index in lane}) - 1, lane
    assert len(plan_lanes(specs, 40)) == len(specs)  # never more lanes than steps
    (single,) = plan_lanes(specs, 1)
    assert set(single[:len(correct)]) == correct  # one lane: the correct runs first, then each control


def test_a_lane_runs_on_one_stack_and_restarts_the_app_for_each_configuration(fakes: Fakes,
                                                                           tmp_path: Path) -> None:
    specs = _specs(tmp_path)
    correct = [index for index, (_, _, expect, _) in enumerate(specs) if not expect][:3]
    control = next(index for index, (label, _, _, _) in enumerate(specs) if label.startswith("mutant api /"))
    done = _lane(specs, [*correct[:2], control, correct[2]], tmp_path)
    (stack,) = fakes.stacks
    assert stack.stopped
    # every run attached to the lane's stack, under its own run directory name
    assert all(spec.attach and spec.stack_root == stack.root for spec in fakes.runs)
    assert len({spec.run_id for spec in fakes.runs}) == 4
    # no restart between the correct runs; the control's configuration, then back
    (api_env, api_workers, api_flush), (back_env, _, back_flush) = stack.restarts
    assert api_env[ENV_APP_UNSAFE_DISABLE] == "api" and api_workers == smoke.CONTROL_APP_WORKERS and api_flush
    assert ENV_APP_UNSAFE_DISABLE not in back_env and back_flush
    assert done[control].passed and all(done[index].passed for index in correct)


def test_a_step_without_its_evidence_runs_again_on_its_stack_with_more_load(fakes: Fakes,
                                                                          tmp_path: Path) -> None:
    specs = _specs(tmp_path)
    correct = next(index for index, (_, _, expect, _) in enumerate(specs) if not expect)
    control = next(index for index, (label, _, _, _) in enumerate(specs) if label.startswith("mutant domain /"))
    # the correct run inconclusive once; the control not caught twice, caught the third time
    fakes.behaviour.update({0: "inconclusive", 1: "pass", 2: "pass", 3: "pass"})
    done = _lane(specs, [correct, control], tmp_path)
    (stack,) = fakes.stacks
    assert [spec.unsafe_disable for spec in fakes.runs] == [(), (), ("domain",), ("domain",), ("domain",)]
    assert len(stack.restarts) == 1  # the runs again went on the stack as it was
    first, again = fakes.runs[:2]
    assert again.duration == first.duration * smoke.MORE_LOAD_FACTOR
    assert again.run_id == f"{first.run_id}-more-1" and sorted([again.run_id, first.run_id])[0] == first.run_id
    assert done[correct].passed and [o.exit_code for o in done[correct].earlier] == [EXIT_INCONCLUSIVE]
    control_runs = fakes.runs[2:]
    assert [spec.duration for spec in control_runs] == [control_runs[0].duration * factor for factor in (1, 2, 4)]
    assert done[control].passed and len(done[control].earlier) == smoke.MORE_LOAD_RUNS
    assert done[control].outcome is not None and done[control].outcome.exit_code == EXIT_VIOLATION


def test_more_load_never_turns_a_failure_into_a_pass(fakes: Fakes, tmp_path: Path) -> None:
    specs = _specs(tmp_path)
    correct = next(index for index, (_, _, expect, _) in enumerate(specs) if not expect)
    control = next(index for index, (label, _, _, _) in enumerate(specs) if label.startswith("mutant domain /"))
    # the correct run violated an invariant: a false alarm, never run again; the
    # control is never caught: it fails after its last run with more load
    fakes.behaviour.update({0: "violation", **{n: "pass" for n in range(1, 2 + smoke.MORE_LOAD_RUNS)}})
    done = _lane(specs, [correct, control], tmp_path)
    assert len(fakes.runs) == 2 + smoke.MORE_LOAD_RUNS
    assert not done[correct].passed and done[correct].earlier == ()
    assert not done[control].passed and len(done[control].earlier) == smoke.MORE_LOAD_RUNS
    assert smoke_exit_code(list(done.values())) == EXIT_VIOLATION
    assert not smoke.lacks_evidence(done[correct])  # the rule itself: a violation is not a matter of load


def test_a_harness_failure_leaves_its_stack_to_no_one(fakes: Fakes, tmp_path: Path) -> None:
    specs = _specs(tmp_path)
    first, second = [index for index, (_, _, expect, _) in enumerate(specs) if not expect][:2]
    fakes.behaviour[0] = "harness"
    done = _lane(specs, [first, second], tmp_path)
    assert [stack.stopped for stack in fakes.stacks] == [True, True]  # a fresh stack for the next step
    assert done[first].outcome is None and "drain" in str(done[first].error)
    assert done[second].passed
    assert smoke_exit_code(list(done.values())) == EXIT_HARNESS


def test_a_stack_that_will_not_restart_is_the_steps_failure_and_replaced(fakes: Fakes, tmp_path: Path) -> None:
    specs = _specs(tmp_path)
    first = next(index for index, (_, _, expect, _) in enumerate(specs) if not expect)
    control = next(index for index, (label, _, _, _) in enumerate(specs) if label.startswith("mutant domain /"))
    fakes.fail_restart = True
    done = _lane(specs, [first, control, first], tmp_path)
    assert len(fakes.stacks) == 2 and all(stack.stopped for stack in fakes.stacks)
    assert done[control].outcome is None and "app exited" in str(done[control].error)
    assert smoke_exit_code(list(done.values())) == EXIT_HARNESS


def test_a_stack_that_will_not_stop_fails_the_job(fakes: Fakes, tmp_path: Path) -> None:
    specs = _specs(tmp_path)
    first = next(index for index, (_, _, expect, _) in enumerate(specs) if not expect)
    fakes.fail_down = True
    done = _lane(specs, [first], tmp_path)
    assert done[first].outcome is not None and done[first].outcome.exit_code == EXIT_OK
    assert "would not stop" in str(done[first].cleanup_error) and not done[first].passed
    assert smoke_exit_code(list(done.values())) == EXIT_HARNESS


def test_ctrl_c_stops_every_lanes_stack_and_starts_no_more_steps(fakes: Fakes, tmp_path: Path) -> None:
    fakes.behaviour[3] = "interrupt"
    base = RunSpec(scenario="mixed", users=4, duration=3.0, app_workers=4, runs_root=tmp_path)
    with pytest.raises(KeyboardInterrupt):
        smoke.smoke(base, out=io.StringIO(), parallel=3)
    assert fakes.stacks and all(stack.stopped for stack in fakes.stacks)
    # the other lanes stopped at their next step: far fewer runs than steps
    assert len(fakes.runs) < len(smoke_specs(base)) - 3


def test_the_lanes_are_balanced_by_their_expected_seconds(tmp_path: Path) -> None:
    specs = [spec for _, spec, _, _ in _specs(tmp_path)]
    longest_step = max(smoke.step_seconds(spec) for spec in specs) + smoke.RESTART_S
    for lanes in (3, 4, 6):
        seconds = [smoke.lane_seconds(plan, specs) for plan in plan_lanes(specs, lanes)]
        assert len(seconds) == lanes
        # no lane longer than another by more than one step (and its restart) ...
        assert max(seconds) - min(seconds) <= longest_step, seconds
        # ... and the balancing never made the greedy plan worse
        assert max(seconds) <= max(smoke.lane_seconds(plan, specs) for plan in _greedy(specs, lanes))
    # a plan with every step on one lane is what the bound rejects (it can fail)
    everything = [list(range(len(specs))), []]
    assert smoke.lane_seconds(everything[0], specs) - smoke.STACK_START_S > longest_step


def _greedy(specs: list[RunSpec], lanes: int) -> list[list[int]]:
    """plan_lanes without its balancing pass."""
    original = smoke._balanced
    try:
        smoke._balanced = lambda plans, _keys, _costs, rounds=0: plans  # type: ignore[assignment]
        return plan_lanes(specs, lanes)
    finally:
        smoke._balanced = original  # type: ignore[assignment]


def test_a_lane_stopped_while_its_stack_restarts_runs_no_further_step(fakes: Fakes, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A SIGTERM reaches only the threads that run a run: a lane restarting its app then
    learns of it from `stopping`, and must not run the step it was restarting for."""
    specs = _specs(tmp_path)
    first = next(index for index, (_, _, expect, _) in enumerate(specs) if not expect)
    control = next(index for index, (label, _, _, _) in enumerate(specs) if label.startswith("mutant api /"))
    stopping = threading.Event()
    restart = FakeStack.restart_services

    def restart_then_stop(self: FakeStack, env: Mapping[str, str], **options: Any) -> None:
        restart(self, env, **options)
        stopping.set()  # the job was stopped meanwhile

    monkeypatch.setattr(FakeStack, "restart_services", restart_then_stop)
    done: dict[int, SmokeStep] = {}
    run_lane(tmp_path / "lane", [first, control, first], specs, done, out=io.StringIO(), lock=threading.Lock(),
             stopping=stopping)
    assert [spec.unsafe_disable for spec in fakes.runs] == [()]  # the control never ran
    assert list(done) == [first] and all(stack.stopped for stack in fakes.stacks)
