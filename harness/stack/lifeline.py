"""How a harness process dies cleanly, by signal or by SIGKILL.

Four pieces:

- `interrupt_signals()`: SIGTERM and SIGHUP behave like Ctrl-C. The first of them
  raises `Interrupted` (a `KeyboardInterrupt`, so every `finally` that already heals
  faults and stops processes on Ctrl-C runs); later ones are ignored so the bounded
  cleanup is not cut short. The CLI exits with 128 + the signal number (143 for
  SIGTERM, 130 for SIGINT, 129 for SIGHUP). An `Interrupted` raised while the main
  thread runs a `__del__` or a weakref callback is swallowed by the interpreter
  (reported as "unraisable"): during the block, `sys.unraisablehook` catches exactly
  that case, puts a token in a `queue.SimpleQueue` (safe to call from anywhere, no
  lock of threading's) and arms a one-shot SIGALRM (`setitimer`, REDELIVER_AFTER) whose
  handler raises it anew once the finalizer is left (raised at once, it would land in
  the finalizer again): no signal is lost, and no thread is started from inside a
  finalizer. SIGALRM is the block's own while it lasts.
  Runs on other threads (the smoke job runs
  several side by side) are interrupted too: a signal reaches only the main thread, so
  the handler raises `Interrupted` asynchronously in every thread inside a `RunGuard`
  (`raise_in_thread`), never inside a `threading.Thread.start` of that thread: this
  module patches `Thread.start` (`guard_thread_starts`, called by `interrupt_signals`,
  `RunGuard` and `raise_in_thread`, never on import) so that a thread starting another one gets the
  exception once its start() has returned (see "no exception into a thread that is
  starting another one" below). Such a thread's `Interrupted` can be swallowed in a
  finalizer too (its run then went on to its verdict after the signal: a smoke job's
  run directory judged, never marked): the hook queues it with the thread's ident,
  and the SIGALRM handler raises it in that thread again while it is still inside
  its guard. Whether a thread is inside a guard is read and changed under the gate
  below (`_GATE`): the handler never interrupts a thread that has just left its run
  (the exception would land in whatever the thread did next: the next step's run
  directory, created before that run's guard, or a lane's stack being stopped), and
  a guard that is left with an interrupt sent but not yet raised takes it back and
  raises it itself, once its cleanup is done.
- `Lifeline`: a pipe whose write end only this process holds. A child given the read
  end (the stack's supervisor) sees end-of-file the moment this process dies, however
  it dies, and shuts down.
- `wait_for_futures()`: how the main thread waits for threads that run runs, before
  a signal and after it (`every=True`: until each thread is done, as an executor's
  shutdown would, while the redelivery above needs the main thread's handler). The
  kernel may deliver a process's signal to any of its threads, and then a main thread
  blocked in a lock (as `concurrent.futures.wait` is) is not woken: the signal's handler
  runs only once it wakes. So it wakes every SIGNAL_CHECK_SECONDS.
- `RunGuard`: one per run. It keeps a lease in the registry (what the run started and
  which faults it has applied) and starts a janitor, `python -m harness.stack.janitor`,
  in a session of its own, reading the lifeline. When the harness dies without finishing
  (SIGKILL), the janitor stops Locust and the run's stack, removes the run's toxics,
  re-enables the proxies it disabled and marks the run directory interrupted, within
  a few seconds. If the janitor dies too, the lease stays and the next up, run or
  down on that Toxiproxy reclaims it (`harness.stack.registry.reclaim`).
"""

from __future__ import annotations

import ctypes
import os
import queue
import signal
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ALL_COMPLETED, FIRST_EXCEPTION, Future, wait
from contextlib import contextmanager
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, TextIO

from harness.stack import registry
from harness.stack.janitor import HANDLED_SIGNALS
from harness.stack.protocol import ServiceActions, Stack

GUARD_ATTRIBUTE = "harness_run_guard"  # set on a thread while it runs inside a RunGuard
# Set on the main thread from the moment a signal starts the shutdown until its
# interrupt_signals block ends: the signal. A thread that starts a run after it (it had
# checked its job's stop flag just before) finds it in RunGuard and stops at once, as the
# runs the signal found running do (interrupt_run_threads).
FIRED_ATTRIBUTE = "harness_interrupt_fired"
REDELIVER_AFTER = 0.001  # seconds from a swallowed Interrupted to its redelivery (SIGALRM)


class Interrupted(KeyboardInterrupt):
    """The harness was asked to stop by a signal; carries the signal."""

    default_signum = signal.SIGINT  # subclasses raised in other threads carry theirs here

    def __init__(self, signum: int | None = None) -> None:
        signum = self.default_signum if signum is None else signum
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def signal_name(interrupt: BaseException | None) -> str | None:
    if isinstance(interrupt, Interrupted):
        return signal.Signals(interrupt.signum).name
    if isinstance(interrupt, KeyboardInterrupt):
        return "SIGINT"
    return None


def exit_code_for(interrupt: KeyboardInterrupt) -> int:
    return interrupt.exit_code if isinstance(interrupt, Interrupted) else 128 + signal.SIGINT


@contextmanager
def interrupt_signals(out: TextIO = sys.stderr) -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP raise `Interrupted` once; the previous handlers come back after."""
    fired: list[int] = []  # local to this block: which signal started the shutdown
    # Interrupted swallowed in a finalizer, to raise again (see the module docstring):
    # the ident of the thread that swallowed it, and its signal.
    swallowed: queue.SimpleQueue[tuple[int, int]] = queue.SimpleQueue()
    main_ident = threading.main_thread().ident

    def redeliver(frame: FrameType | None) -> int | None:
        """Raise again, in its thread, each Interrupted swallowed in another thread's
        finalizer; the main thread's own swallowed signal is returned, for the handler
        to raise. A token whose thread is still inside the hook waits for the next
        SIGALRM (raised now, the exception would land in the finalizer again)."""
        again = None
        later: list[tuple[int, int]] = []
        while True:
            try:
                token = swallowed.get_nowait()
            except queue.Empty:
                break
            ident, signum = token
            if ident == main_ident:
                if frame is not None and frame.f_code is unraisable.__code__:
                    later.append(token)
                else:
                    again = signum
            elif _runs_code(ident, unraisable.__code__):
                later.append(token)
            else:
                interrupt_guarded_thread(ident, signum)  # nothing once its run is over
        for token in later:
            swallowed.put(token)
        if later:
            signal.setitimer(signal.ITIMER_REAL, REDELIVER_AFTER)
        return again

    def handler(signum: int, frame: FrameType | None) -> None:
        again = redeliver(frame)
        if again is not None:
            raise Interrupted(again)  # the first one, lost in a finalizer: delivered again
        if signum == signal.SIGALRM:
            return  # a redelivery whose token an earlier one took: nothing left to raise
        if fired:
            print(f"harness: {signal.Signals(signum).name} while stopping after "
                  f"{signal.Signals(fired[0]).name}; still cleaning up", file=out, flush=True)
            return
        fired.append(signum)
        # Before the threads are searched: a run that starts in between finds the flag
        # (RunGuard.__enter__ looks, and sets its guard, under the gate the search
        # takes), so none slips through.
        setattr(threading.main_thread(), FIRED_ATTRIBUTE, signum)
        interrupt_run_threads(signum)
        raise Interrupted(signum)

    guard_thread_starts()
    previous_hook = sys.unraisablehook

    def unraisable(report: Any) -> None:
        interrupt = report.exc_value
        me = threading.current_thread()
        if isinstance(interrupt, Interrupted) and me.ident is not None and (
                me is threading.main_thread() or getattr(me, GUARD_ATTRIBUTE, None) is not None):
            swallowed.put((me.ident, interrupt.signum))
            # The handler runs again on SIGALRM, a moment later: by then the finalizer
            # (and this hook) are left. A handler run right away would raise inside them.
            # (setitimer is the process's, and allowed from any thread.)
            signal.setitimer(signal.ITIMER_REAL, REDELIVER_AFTER)
            return
        previous_hook(report)

    previous = {signum: signal.getsignal(signum) for signum in (*HANDLED_SIGNALS, signal.SIGALRM)}
    for signum in (*HANDLED_SIGNALS, signal.SIGALRM):
        signal.signal(signum, handler)
    sys.unraisablehook = unraisable
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        sys.unraisablehook = previous_hook
        setattr(threading.main_thread(), FIRED_ATTRIBUTE, None)
        for signum, old in previous.items():
            signal.signal(signum, old if old is not None else signal.SIG_DFL)


def _interrupted_kind(signum: int) -> type[Interrupted]:
    # The interpreter raises an exception *class* in the target thread, so the signal
    # travels as a class attribute.
    return type(f"Interrupted{signal.Signals(signum).name}", (Interrupted,), {"default_signum": signum})


def interrupt_run_threads(signum: int) -> list[str]:
    """Raise `Interrupted` in every other thread that is running a run; their names."""
    kind = _interrupted_kind(signum)
    names = []
    me = threading.current_thread()
    # Under the gate: a thread is in its run from the moment its guard is read here to
    # the moment the exception is sent (RunGuard changes its guard under the gate too).
    with _GATE:
        # threading's table read without its lock, as in _thread_of: this runs in a
        # signal handler, which may have interrupted its own thread holding that lock.
        for thread in list(threading._active.values()):  # type: ignore[attr-defined]
            if thread is me or thread.ident is None or getattr(thread, GUARD_ATTRIBUTE, None) is None:
                continue
            raise_in_thread(thread.ident, kind)
            names.append(thread.name)
    return names


def interrupt_guarded_thread(ident: int, signum: int) -> bool:
    """Raise `Interrupted` in the thread `ident` if it is still inside a run's guard
    (an earlier one was swallowed there); whether it was sent."""
    with _GATE:
        thread = _thread_of(ident)
        if thread is None or getattr(thread, GUARD_ATTRIBUTE, None) is None:
            return False
        raise_in_thread(ident, _interrupted_kind(signum))
        return True


def _runs_code(ident: int, code: Any) -> bool:
    """Whether the thread `ident` is inside a call of `code` (anywhere on its stack)."""
    frame: FrameType | None = sys._current_frames().get(ident)
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False


def _set_async_exc(ident: int, kind: type[BaseException] | None) -> int:
    """Make `kind` pending in the thread `ident` (None: cancel its pending one); how
    many thread states were changed."""
    exc = ctypes.py_object(kind) if kind is not None else ctypes.c_void_p(None)
    return int(ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), exc))


# --- no exception into a thread that is starting another one ------------------------
#
# An exception raised by ident is not raised at once: it is made pending and fires at
# the target's next check between bytecodes, wherever the target has got to by then.
# Landing inside `threading.Thread.start` it breaks threading's bookkeeping: after
# `_start_new_thread` returned, start()'s `except Exception` removes the new thread
# from `threading._limbo` that the new thread removes too, and one of them ends in a
# KeyError instead of the exception; before it, the thread object stays in
# limbo, never started; and CPython 3.11 gives the new thread a state carrying its
# starter's ident until it runs, so an exception aimed at the starter then lands in
# the new thread, which dies unstarted while its starter waits in start() for ever.
#
# So every `Thread.start` (patched once, process-wide, by `guard_thread_starts`:
# starts inside libraries and executors count too) runs behind `_GATE`, which
# `raise_in_thread` takes as well:
# - while a thread is starting one, an exception for it is deferred, and raised by
#   the starter itself once start() has returned (the new thread runs normally);
# - one already pending when it begins to start is cancelled and raised by the
#   starter before the start. Which are pending: `raise_in_thread` records each one
#   it sends, and the exception's own constructor (run in the target when the
#   exception is caught, or reported) forgets it.
# A reentrant lock: a signal handler (raise_in_thread) may run on the main thread
# between two bytecodes of a start's critical section.

_GATE = threading.RLock()
_starting: weakref.WeakKeyDictionary[threading.Thread, int] = weakref.WeakKeyDictionary()
_deferred: weakref.WeakKeyDictionary[threading.Thread, type[BaseException]] = weakref.WeakKeyDictionary()
_pending: weakref.WeakKeyDictionary[threading.Thread, type[BaseException]] = weakref.WeakKeyDictionary()
# The unpatched start, also when this module is imported again (importlib.reload).
_original_start: Callable[[threading.Thread], None] = getattr(
    threading.Thread.start, "harness_original_start", threading.Thread.start)


def _thread_of(ident: int) -> threading.Thread | None:
    # threading's own table, read without its lock: a signal handler that calls this
    # may have interrupted its own thread holding that (non-reentrant) lock.
    thread = threading._active.get(ident)  # type: ignore[attr-defined]
    return thread if isinstance(thread, threading.Thread) else None


def _tracked(kind: type[BaseException]) -> type[BaseException]:
    """`kind` with a constructor that, in the target thread, forgets it is pending."""

    def __init__(self: BaseException, *args: Any, **kwargs: Any) -> None:
        with _GATE:
            _pending.pop(threading.current_thread(), None)
        kind.__init__(self, *args, **kwargs)

    return type(kind.__name__, (kind,), {"__init__": __init__, "__module__": kind.__module__,
                                         "__qualname__": kind.__qualname__})


def _immune_start(self: threading.Thread) -> None:
    """`threading.Thread.start`, never with an exception of `raise_in_thread` inside it."""
    me = threading.current_thread()
    pending: type[BaseException] | None = None
    deferred: type[BaseException] | None = None
    try:
        with _GATE:
            _starting[me] = _starting.get(me, 0) + 1
            pending = _pending.pop(me, None)
            if pending is not None and me.ident is not None:
                _set_async_exc(me.ident, None)
        if pending is not None:
            raise pending()  # as if it had landed just before the start
        _original_start(self)
    finally:
        with _GATE:
            depth = _starting.pop(me, 1) - 1
            if depth:
                _starting[me] = depth
            else:
                deferred = _deferred.pop(me, None)
    if deferred is not None:
        raise deferred()


def _reset_after_fork() -> None:
    """A forked child has one thread: the gate, which another thread may have held at
    the fork, starts free (threading resets its own locks the same way)."""
    global _GATE
    _GATE = threading.RLock()
    _starting.clear()
    _deferred.clear()
    _pending.clear()


def guard_thread_starts() -> None:
    """Patch `threading.Thread.start` to `_immune_start`, once per process (a second
    call does nothing). Called, not done on import: by `interrupt_signals` (every CLI
    command runs inside it, before it starts a thread), by `RunGuard` and by
    `raise_in_thread`, so no interrupt is ever delivered before the gate is in place."""
    if threading.Thread.start is _immune_start:
        return
    os.register_at_fork(after_in_child=_reset_after_fork)
    setattr(_immune_start, "harness_original_start", _original_start)  # noqa: B010 - a function's attribute
    threading.Thread.start = _immune_start  # type: ignore[method-assign]


def raise_in_thread(ident: int, kind: type[BaseException]) -> None:
    """Raise `kind` in the thread `ident`, never inside a `Thread.start` of it (above):
    a thread that is starting one gets it once its start() has returned.

    One loss remains, which the caller does not see: an exception that lands while
    the thread runs a weakref callback or a `__del__` is reported as unraisable and
    dropped. Inside `interrupt_signals` an `Interrupted` so dropped in a run's thread
    is raised there again (the module docstring); a run thread that left its run
    before that finished it, and the next run it starts finds the main thread's
    fired flag (RunGuard.__enter__) and does not start.
    """
    guard_thread_starts()
    with _GATE:
        thread = _thread_of(ident)
        if thread is None:  # not a threading thread: nothing of threading to protect
            _set_async_exc(ident, kind)
            return
        if thread in _starting:
            _deferred[thread] = kind
            return
        if _set_async_exc(ident, _tracked(kind)):
            _pending[thread] = kind


SIGNAL_CHECK_SECONDS = 0.25  # how often a main thread waiting for others runs its signal handlers


def wait_for_futures(futures: Sequence[Future[Any]], *, every: bool = False) -> None:
    """Return once every future is done or one of them raised (as
    `concurrent.futures.wait(futures, return_when=FIRST_EXCEPTION)`; with `every`,
    only once every future is done), waking every SIGNAL_CHECK_SECONDS so that a
    signal is handled within that time (after the first signal too: a run whose
    Interrupted was swallowed in a finalizer gets it again from the handler).

    A Python signal handler runs in the main thread only, between two bytecodes. When
    the kernel hands the signal to another thread, a main thread blocked in a lock's
    wait without a timeout is not interrupted and runs no handler until it wakes (seen:
    a smoke job that a SIGTERM did not stop while its lanes went on step after step)."""
    while True:
        done, pending = wait(futures, timeout=SIGNAL_CHECK_SECONDS,
                             return_when=ALL_COMPLETED if every else FIRST_EXCEPTION)
        if not pending or (not every and any(not future.cancelled() and future.exception() is not None
                                             for future in done)):
            return


# --- the pipe ---------------------------------------------------------------------------

class Lifeline:
    """A pipe: children hold the read end and see EOF when this process is gone."""

    def __init__(self) -> None:
        # Both ends are non-inheritable: subprocess hands the read end only to the
        # children named with pass_fds, and the write end to no one (a child that
        # held it would keep the line alive after we die).
        self.read_fd, self._write_fd = os.pipe()

    def close(self) -> None:
        for fd in (self.read_fd, self._write_fd):
            try:
                os.close(fd)
            except OSError:
                pass  # closed already (close() twice, or -1 after the first): nothing left to release
        self.read_fd = self._write_fd = -1

    def __enter__(self) -> Lifeline:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()


# --- one run ----------------------------------------------------------------------------

JANITOR_WAIT = 10.0


def _enter_guard(guard: RunGuard) -> int | None:
    """Put `guard` on this thread, unless the harness is stopping: then the signal
    that stops it. Under the gate, as the handler's search (interrupt_run_threads)."""
    with _GATE:
        fired: int | None = getattr(threading.main_thread(), FIRED_ATTRIBUTE, None)
        if fired is None:
            setattr(threading.current_thread(), GUARD_ATTRIBUTE, guard)
        return fired


def _leave_guard() -> type[BaseException] | None:
    """Take this thread's guard off; an interrupt sent to it and not raised yet is
    cancelled and returned (for the caller to raise). Under the gate: none is sent
    after this. (One pending as this begins may still land in it, at any call before
    the cancel: `RunGuard.leave` is called inside the guarded block for that.)"""
    me = threading.current_thread()
    ident = threading.get_ident()
    with _GATE:
        _set_async_exc(ident, None)  # first: nothing pending can land after this
        setattr(me, GUARD_ATTRIBUTE, None)
        late = _pending.pop(me, None)
    return late


def _holds_something(lease: registry.Lease) -> bool:
    """Faults still recorded, or a recorded process group still alive."""
    return lease.holds_faults() or any(process.owner.alive() for process in lease.processes)


class RunGuard:
    """The lease and the janitor of one run (a context manager around the whole run)."""

    def __init__(self, run_dir: Path, *, janitor: bool = True) -> None:
        guard_thread_starts()  # before the run starts a thread an interrupt may reach
        self.run_dir = Path(run_dir)
        self.lifeline = Lifeline()
        self.lease = registry.new_lease("run", run_dir=self.run_dir)
        self._janitor: subprocess.Popen[bytes] | None = None
        self._want_janitor = janitor
        self._phase: str | None = None  # how far the run got when the interrupt came
        # The nemesis thread records faults while the main thread records Locust.
        self._lock = threading.Lock()
        self._closed = False  # after the run: a late record must not bring the lease back

    @property
    def short_id(self) -> str:
        """Six hex digits unique to this run (e.g. for its proxy names on a shared Toxiproxy)."""
        return self.lease.id.rsplit("-", 1)[-1]

    # lifecycle

    def __enter__(self) -> RunGuard:
        try:
            fired = _enter_guard(self)
            if fired is not None:
                # The harness is stopping (a signal came while this thread was about to
                # start the run): the run does not start, and is marked like the others
                # (the exit below).
                raise Interrupted(fired)
            registry.write_lease(self.lease)
            if self._want_janitor:
                with open(self.run_dir / "lifeline.log", "ab") as log:
                    self._janitor = subprocess.Popen(
                        [sys.executable, "-m", "harness.stack.janitor", "--lease",
                         str(registry.lease_path(self.lease.id))],
                        stdin=self.lifeline.read_fd, stdout=subprocess.DEVNULL, stderr=log,
                        start_new_session=True,  # a Ctrl-C to our process group must not reach it
                    )
        except BaseException as error:
            # The guard is already set, so a signal's Interrupted can land here (while
            # the janitor starts, which takes a while on a busy machine). A with block
            # whose __enter__ raises gets no __exit__: without this the run was left
            # for the janitor to mark, without its signal, once the harness had died.
            self.__exit__(type(error), error, error.__traceback__)
            raise
        return self

    def leave(self) -> None:
        """The run's body is over (the last thing in it, in a `finally`): from here on no
        signal interrupts this thread. An interrupt sent to it and not raised yet is
        raised now, inside the block, so that `__exit__` marks the run. (`__exit__`
        leaves too, but an interrupt pending as the block ends can land on the first
        line of `__exit__`, which then never runs.)"""
        late = _leave_guard()
        if late is not None:
            raise late()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        # First, so that a signal from here on finds no run in this thread to interrupt
        # and the cleanup below is not cut short; one sent just before and not raised
        # yet is taken back, and raised once the cleanup is done.
        taken_back = _leave_guard()
        late = taken_back() if taken_back is not None and not isinstance(value, KeyboardInterrupt) else None
        if late is not None:
            value = late
        if isinstance(value, KeyboardInterrupt):
            registry.mark_interrupted(self.run_dir, signal_name=signal_name(value), by="harness",
                                      phase=self._phase)
        with self._lock:
            self._closed = True
            if _holds_something(self.lease):
                # The run's own cleanup could not undo everything (it failed half-way):
                # the lease stays and the janitor, woken by the lifeline closing below,
                # undoes the rest. An ended run is no interrupted one: no mark.
                if not isinstance(value, KeyboardInterrupt):
                    self.lease.run_dir = None
                registry.write_lease(self.lease)
            else:
                registry.remove_lease(self.lease.id)
        self.lifeline.close()
        if self._janitor is not None:
            try:
                self._janitor.wait(timeout=JANITOR_WAIT)
            except subprocess.TimeoutExpired:
                pass  # still healing in its own session; it finishes without us
        if late is not None:
            raise late  # the signal came while the run was in its guard: it stops here

    def on_interrupt(self, *actions: Callable[[], object]) -> Callable[..., bool]:
        """An ExitStack `push` callback: run each action in turn, each one best effort
        (e.g. a short drain, then the export, so the interrupted run stays checkable)
        when the block ends by an interrupt."""

        def callback(kind: type[BaseException] | None, value: BaseException | None,
                     traceback: TracebackType | None) -> bool:
            if isinstance(value, KeyboardInterrupt):
                self._phase = registry.run_phase(self.run_dir)
                for action in actions:
                    try:
                        action()
                    except Exception as error:  # noqa: BLE001 - best effort while stopping
                        print(f"harness: while stopping: {error}", file=sys.stderr)
            return False

        return callback

    # what the run started

    def _update(self, change: Callable[[registry.Lease], object]) -> None:
        """Change the lease and write it, one change at a time."""
        with self._lock:
            change(self.lease)
            if not self._closed:
                registry.write_lease(self.lease)

    def add_process(self, pid: int, name: str, signum: signal.Signals = signal.SIGTERM) -> None:
        """A process group (led by pid) the janitor stops if the harness dies."""
        entry = registry.OwnedProcess(registry.Owner.of(pid), name, signum.name)
        self._update(lambda lease: lease.processes.append(entry))

    def remove_process(self, pid: int) -> None:
        def remove(lease: registry.Lease) -> None:
            lease.processes = [process for process in lease.processes if process.owner.pid != pid]
        self._update(remove)

    def use_toxiproxy(self, url: str, *, local: bool) -> None:
        def use(lease: registry.Lease) -> None:
            lease.toxiproxy_url = registry.normalize_url(url)
            lease.toxiproxy_local = local
        self._update(use)

    def proxy_created(self, claim: registry.ProxyClaim) -> None:
        """A proxy the run creates on a Toxiproxy (recorded before it is created): the
        janitor deletes it if the harness dies (the probe's proxies, for one)."""
        self._update(lambda lease: lease.proxies.append(claim))

    def proxy_deleted(self, name: str) -> None:
        def remove(lease: registry.Lease) -> None:
            lease.proxies = [proxy for proxy in lease.proxies if proxy.name != name]
        self._update(remove)

    def toxic_added(self, proxy: str, name: str) -> None:
        self._update(lambda lease: lease.toxics.append(registry.ToxicClaim(proxy, name)))

    def toxic_removed(self, proxy: str, name: str) -> None:
        def remove(lease: registry.Lease) -> None:
            lease.toxics = [toxic for toxic in lease.toxics if toxic != registry.ToxicClaim(proxy, name)]
        self._update(remove)

    def proxy_disabled(self, proxy: str) -> None:
        def disable(lease: registry.Lease) -> None:
            if proxy not in lease.disabled:
                lease.disabled.append(proxy)
        self._update(disable)

    def proxy_enabled(self, proxy: str) -> None:
        def enable(lease: registry.Lease) -> None:
            lease.disabled = [disabled for disabled in lease.disabled if disabled != proxy]
        self._update(enable)

    def cleared(self) -> None:
        """Every fault healed (a reset): nothing left to undo."""
        def clear(lease: registry.Lease) -> None:
            lease.toxics, lease.disabled = [], []
        self._update(clear)

    def processes_of(self, stack: Stack) -> ServiceActions:
        """The stack's process faults, recorded when the stack outlives the run (one
        `harness up` left): a consumer paused or killed by a run that died is started
        again by the janitor. A run's own stack goes down with it: nothing to record."""
        info = stack.info
        if info.owner != "up" or info.mode != "local":
            return stack
        return RecordedProcesses(stack, self)

    def service_faulted(self, root: str, service: str) -> None:
        entry = registry.FaultedService(root, service)
        def fault(lease: registry.Lease) -> None:
            if entry not in lease.services:
                lease.services.append(entry)
        self._update(fault)

    def service_healed(self, root: str, service: str) -> None:
        entry = registry.FaultedService(root, service)
        def heal(lease: registry.Lease) -> None:
            lease.services = [faulted for faulted in lease.services if faulted != entry]
        self._update(heal)


class RecordedProcesses:
    """A stack's kill/pause/... with each fault on the run's lease while it lasts."""

    def __init__(self, stack: Stack, guard: RunGuard) -> None:
        self.stack = stack
        self.guard = guard
        self.root = str(stack.root)

    def kill(self, service: str) -> None:
        self.guard.service_faulted(self.root, service)
        self.stack.kill(service)

    def pause(self, service: str) -> None:
        self.guard.service_faulted(self.root, service)
        self.stack.pause(service)

    def restart(self, service: str) -> None:
        self.guard.service_faulted(self.root, service)
        self.stack.restart(service)
        self.guard.service_healed(self.root, service)

    def start(self, service: str) -> None:
        self.stack.start(service)
        self.guard.service_healed(self.root, service)

    def resume(self, service: str) -> None:
        self.stack.resume(service)
        self.guard.service_healed(self.root, service)
