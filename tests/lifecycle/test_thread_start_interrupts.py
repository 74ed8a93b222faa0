"""An exception raised in a thread by harness.stack.lifeline.raise_in_thread never lands
inside a `threading.Thread.start` of that thread (issue 35: a `Stop` just after
`_start_new_thread` returned ended the starter with a KeyError from threading's own
bookkeeping instead of the `Stop`, and the interrupted run thread with it).

The first test puts the delivery at that exact point (a patched `_start_new_thread`
that, once the new thread runs, has the exception raised in its caller and waits for
it); the loop starts threads while interrupts arrive, as a signal in a smoke job does.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from harness.stack.lifeline import Interrupted, guard_thread_starts, raise_in_thread


@pytest.fixture(autouse=True)
def _start_gate() -> None:
    # What interrupt_signals and RunGuard do before any thread of a run starts.
    guard_thread_starts()


class Stop(Exception):
    """An Exception (start()'s `except Exception` catches it), unlike Interrupted."""


@pytest.mark.parametrize("kind", [Stop, Interrupted])
def test_an_exception_raised_right_after_the_new_thread_started_reaches_the_starter_intact(
        monkeypatch: pytest.MonkeyPatch, kind: type[BaseException]) -> None:
    real_start_new_thread = threading._start_new_thread  # type: ignore[attr-defined]
    ask, delivered = threading.Event(), threading.Event()
    starter_ident: list[int] = []

    def deliverer() -> None:
        ask.wait()
        raise_in_thread(starter_ident[0], kind)
        delivered.set()

    def start_new_thread(function: Callable[..., object], args: tuple[Any, ...]) -> int:
        ident = int(real_start_new_thread(function, args))
        if threading.current_thread().name != "starter":
            return ident
        helper = function.__self__  # type: ignore[attr-defined]
        helper._started.wait()
        while helper in threading._limbo:  # type: ignore[attr-defined]
            time.sleep(0.001)  # until the new thread has taken itself out of threading's limbo
        ask.set()
        delivered.wait()  # the exception is pending in this thread from here
        return ident

    outcome: list[str] = []

    def starter() -> None:
        starter_ident.append(threading.get_ident())
        helper = threading.Thread(target=lambda: None, name="helper")
        try:
            helper.start()
            outcome.append("started, no exception")
        except kind:
            outcome.append("raised")
        except BaseException as error:  # noqa: BLE001 - what the test looks for
            outcome.append(type(error).__name__)
        helper.join(10)
        outcome.append("helper ran" if not helper.is_alive() and helper.ident is not None else "helper hung")

    helper_deliverer = threading.Thread(target=deliverer, daemon=True)
    helper_deliverer.start()
    monkeypatch.setattr(threading, "_start_new_thread", start_new_thread)
    thread = threading.Thread(target=starter, name="starter", daemon=True)
    thread.start()
    thread.join(20)
    helper_deliverer.join(10)
    assert outcome == ["raised", "helper ran"]


def test_an_exception_already_caught_is_not_raised_again_by_the_next_start() -> None:
    caught, started = threading.Event(), threading.Event()
    outcome: list[str] = []

    def target() -> None:
        try:
            while True:
                time.sleep(0.001)
        except Stop:
            caught.set()
        try:
            helper = threading.Thread(target=started.set)
            helper.start()
            helper.join(10)
            outcome.append("started")
        except Stop:
            outcome.append("raised again")

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    assert thread.ident is not None
    raise_in_thread(thread.ident, Stop)
    thread.join(20)
    assert caught.is_set() and started.is_set() and outcome == ["started"]


def test_threads_that_start_threads_while_interrupts_arrive_end_interrupted_or_normally(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A lost exception (one landing in a weakref callback is reported as unraisable)
    # leaves its starter to end normally after its bounded number of starts.
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: None)
    escaped: list[str] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: escaped.append(args.exc_type.__name__))
    kinds = [Stop, type("InterruptedSIGTERM", (Interrupted,), {"default_signum": signal.SIGTERM})]
    endings: list[str] = []
    hung = 0
    for index in range(200):
        kind = kinds[index % 2]
        ready = threading.Event()

        def starter(ready: threading.Event = ready, kind: type[BaseException] = kind) -> None:
            ready.set()
            try:
                for _ in range(200):
                    helper = threading.Thread(target=lambda: None)
                    helper.start()
                    helper.join()
            except kind:
                endings.append("interrupted")
                return
            endings.append("normally")

        thread = threading.Thread(target=starter, daemon=True)
        thread.start()
        ready.wait(5)
        assert thread.ident is not None
        raise_in_thread(thread.ident, kind)
        thread.join(20)
        hung += thread.is_alive()
    assert escaped == [] and hung == 0
    assert len(endings) == 200 and set(endings) <= {"interrupted", "normally"}
    assert threading._limbo == {}  # type: ignore[attr-defined]


def test_a_pending_exception_is_cancelled_and_raised_before_the_start() -> None:
    # White-box: the record stands for one sent (and not fired yet) before the thread
    # began its start, which CPython may fire late (after another thread took its own
    # pending exception and cleared the interpreter's flag); cancelling it is the test
    # below.
    from harness.stack import lifeline

    go = threading.Lock()
    go.acquire()
    helper = threading.Thread(target=lambda: None)
    outcome: list[str] = []

    def target() -> None:
        with go:  # blocked in C: nothing fires until the lock is released
            pass
        try:
            helper.start()
            outcome.append("started")
        except Stop:
            outcome.append("raised")

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    with lifeline._GATE:
        lifeline._pending[thread] = Stop
    go.release()
    thread.join(10)
    assert outcome == ["raised"] and helper.ident is None  # raised once, and before the start
    assert thread not in lifeline._pending


def test_a_cancelled_exception_never_fires() -> None:
    from harness.stack import lifeline

    go = threading.Lock()
    go.acquire()
    outcome: list[str] = []

    def target() -> None:
        try:
            with go:
                pass
            outcome.append("normally")
        except Stop:
            outcome.append("raised")

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    assert thread.ident is not None
    assert lifeline._set_async_exc(thread.ident, Stop) == 1
    assert lifeline._set_async_exc(thread.ident, None) == 1
    go.release()
    thread.join(10)
    assert outcome == ["normally"]
