"""A probe plan's `explore:` carried out: the dependency proxies as the explorer's
`StepSource`, the service restarted after each crash, the record written.

Contract:
- `ProxyStepSource` watches each dependency proxy with its `protocol:` and the role
  `service` (harness.toxiproxy.steps_client.ProxySteps), so a step reads
  `db COMMIT - service`; a trigger goes to the proxy the step's first word names.
- `ProbeExplorer(rig, spec, seed, grace)` runs harness.nemesis.explorer.explore on a
  thread of its own beside the load (`start()` as the load starts, `finish()` once it
  is over, which waits for the thread). After a `before` or `after` crash it checks
  that the killed pid was the service's (its main process or one in its process
  group when the crash was armed: anything else is an ExploreError, exit 2) and
  restarts the service as after a plan's kill (ProbedService.restart: the group
  SIGKILLed, started again, waited for until ready). While a killing crash is armed
  the service's own-death check is held off (`ProbedService.expect_crash`).
- `finish()` ends every fault it made: a still-armed trigger is disarmed, a paused
  pid resumed, a dead service started again, the watches switched off; then it
  appends each crash to faults.jsonl and returns the `Exploration`. Once the
  checker has put violations on crashes, `coverage_line(exploration)` is the
  coverage table's line (kind `coverage`) for the same log.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from harness.errors import HarnessError
from harness.nemesis.explorer import KILLING_ACTIONS, CrashRecord, Exploration, ExploreError, ExploreSpec, explore
from harness.probe.service import ProbedService
from harness.toxiproxy.steps_client import ProxySteps, StepApiError

ROLE = "service"  # the sender of the steps a probe's dependency proxies see


class ProxyStepSource:
    """The explorer's `StepSource` over a run's dependency proxies."""

    def __init__(self, api_url: str, proxies: Mapping[str, str], protocols: Mapping[str, str],
                 pause_ms: int = 500) -> None:
        self.clients = {proxy: ProxySteps(api_url, proxy) for proxy in proxies.values()}
        self.protocols = {proxies[name]: protocol for name, protocol in protocols.items() if name in proxies}
        self.pause_ms = pause_ms

    def watch(self) -> None:
        for proxy, client in self.clients.items():
            client.watch(self.protocols[proxy], ROLE)

    def unwatch(self) -> None:
        for client in self.clients.values():
            with contextlib.suppress(StepApiError, OSError):
                client.unwatch()

    def steps(self) -> dict[str, int]:
        seen: dict[str, int] = {}
        for client in self.clients.values():
            seen.update(client.steps())
        return seen

    def _client(self, step: str) -> ProxySteps:
        proxy = step.split(" ", 1)[0]
        if proxy not in self.clients:
            raise ExploreError(f"explore: step {step!r} names no dependency proxy of this run")
        return self.clients[proxy]

    def arm(self, action: str, step: str) -> object:
        client = self._client(step)
        trigger = client.arm(action, step, duration_ms=self.pause_ms if action == "pause" else 0)
        return (client.proxy, int(trigger["id"]))

    @staticmethod
    def _armed(armed: object) -> tuple[str, int]:
        assert isinstance(armed, tuple)
        proxy, trigger_id = armed
        return str(proxy), int(trigger_id)

    def fired(self, armed: object) -> Mapping[str, Any] | None:
        proxy, trigger_id = self._armed(armed)
        for trigger in self.clients[proxy].triggers():
            if trigger["id"] == trigger_id:
                fired: Mapping[str, Any] | None = trigger.get("fired")
                return fired
        return None

    def disarm(self, armed: object) -> bool:
        proxy, trigger_id = self._armed(armed)
        try:
            self.clients[proxy].disarm(trigger_id)
        except StepApiError:
            return False
        return True


def process_group(pgid: int) -> set[int]:
    """The pids whose process group is `pgid` (from /proc)."""
    pids = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", encoding="ascii", errors="replace") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid:
                pids.add(int(entry.name))
        except (OSError, IndexError, ValueError):
            continue
    return pids


class _Source:
    """The proxies' source, with the service's process group noted at each arming
    (a crash's pid must be one of them) and its own-death check held off."""

    def __init__(self, inner: ProxyStepSource, service: ProbedService) -> None:
        self.inner = inner
        self.service = service
        self.group: set[int] = set()
        self.paused: set[int] = set()

    def steps(self) -> Mapping[str, int]:
        return self.inner.steps()

    def arm(self, action: str, step: str) -> object:
        pid = self.service.pid
        self.group = ({pid} | process_group(pid)) if pid is not None else set()
        if action in KILLING_ACTIONS:
            self.service.expect_crash(True)
        return self.inner.arm(action, step)

    def fired(self, armed: object) -> Mapping[str, Any] | None:
        return self.inner.fired(armed)

    def disarm(self, armed: object) -> bool:
        taken = self.inner.disarm(armed)
        if taken:
            self.service.expect_crash(False)
        return taken


class ProbeExplorer:
    """One run's exploration, on a thread beside the load."""

    def __init__(self, *, api_url: str, proxies: Mapping[str, str], protocols: Mapping[str, str],
                 service: ProbedService, spec: ExploreSpec, seed: int, fault_log: Path) -> None:
        self.proxies = ProxyStepSource(api_url, proxies, protocols, spec.pause_ms)
        self.source = _Source(self.proxies, service)
        self.service = service
        self.spec = spec
        self.seed = seed
        self.fault_log = fault_log
        self.stop = threading.Event()
        self.result: Exploration | None = None
        self.error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.proxies.watch()
        self._thread = threading.Thread(target=self._run, name="probe-explorer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.result = explore(self.source, self.spec, self.seed, self._recover, stop=self.stop)
        except BaseException as error:  # handed to finish(), which raises it on the probe's thread
            self.error = error

    def _recover(self, record: CrashRecord) -> None:
        if record.action == "pause" and record.pid is not None:
            self.source.paused.add(record.pid)
        if record.action not in KILLING_ACTIONS:
            return
        try:
            if record.pid is None and record.error and "no process owns" not in record.error:
                return  # the trigger was dropped with its connection (parsing stopped): no crash
            if record.pid is None:
                raise ExploreError(f"explore: the crash {record.action} {record.step!r} found no process: "
                                   f"{record.error or 'no process owns the connection'}")
            if record.pid not in self.source.group:
                raise ExploreError(f"explore: the crash {record.action} {record.step!r} killed pid {record.pid}, "
                                   f"which is not the service's process (group {sorted(self.source.group)}): "
                                   "the step cannot be mapped to the service")
            self.service.restart("service")  # as after a plan's kill: the group killed, started, ready
        finally:
            self.service.expect_crash(False)

    def finish(self) -> Exploration:
        """Stop, leave nothing stopped or dead, write the log; raise the thread's error."""
        self.stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.spec.wait + 60)
        try:
            self._clean_up()
        finally:
            self.proxies.unwatch()
        if isinstance(self.error, HarnessError):
            raise self.error
        if self.error is not None:
            raise ExploreError(f"explore: {type(self.error).__name__}: {self.error}") from self.error
        if self.result is None:
            raise ExploreError("explore: the explorer did not end")
        self._log(self.result)
        return self.result

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _clean_up(self) -> None:
        for client in self.proxies.clients.values():
            with contextlib.suppress(StepApiError, OSError):
                for trigger in client.triggers():
                    if trigger.get("fired") is None:
                        with contextlib.suppress(StepApiError):
                            client.disarm(int(trigger["id"]))
        for pid in self.source.paused:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGCONT)
        self.service.expect_crash(False)
        if self.service.pid is None or not self.service.running:
            self.service.restart("service")

    def _log(self, result: Exploration) -> None:
        self.fault_log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.fault_log, "ab") as log:
            for crash in result.crashes:
                log.write(orjson.dumps(crash.fault_line(), option=orjson.OPT_APPEND_NEWLINE))


def coverage_line(result: Exploration) -> dict[str, Any]:
    """The coverage table as one faults.jsonl line (no `start`: it is no fault window)."""
    return {"name": "explore-coverage", "kind": "coverage",
            "target": "every-step" if result.spec.every else ",".join(result.spec.steps), "type": None,
            "stream": None, "attributes": None, "toxicity": None, "action": None, "start": None,
            "end": time.time(), "error": None, "seed": result.seed,
            "coverage": [row.to_dict() for row in result.table()], "reasons": result.reasons()}
