"""One probe run: proxy in front of the service, load under faults, final reads, verdict.

`run_probe(spec)`:
1. sets up the rig (harness.probe.rig): a Toxiproxy proxy in front of `upstream` (the
   embedded server on a free loopback port, or a proxy named `probe_<pid>_<token>` on
   a real Toxiproxy given by URL, removed afterwards); with `service:`, the service
   itself, started on a free port behind one proxy per dependency (`dependencies:`),
   under the run's lease and janitor;
2. runs Locust headless with the probe's users against the proxy (and, with `webhooks:`,
   the provider's deliveries through it: harness.probe.webhooks), and the fault
   plan's windows beside it (harness.nemesis.plans.NemesisRunner). A plan addresses the
   probe's proxy as `app`, each dependency's by its name (or all of them as
   `dependencies`), the payment provider's (`provider:`) as `provider` and the
   service's process as `service` (harness.probe.plan_targets),
   so the project's own network plans work unchanged; a service that ends on its own
   stops the run (exit 2, with its log's tail);
3. after the load and the healing, retries once more every request (and webhook
   delivery) that never got a 2xx (harness.probe.late_retries), with a plan's
   `aged_retries:` sends the keys that succeeded again on the service's clock moved
   through their lifetime (harness.probe.aged_retries), reads back (directly from the upstream) every
   acknowledged resource and searches every key, when the config gives the URLs
   (as the identity that sent it, and each resource also as another identity, with
   `identities:`), asks each endpoint's oracle about the effects (`effects:`) and,
   with `provider:`, exports the provider's ledger (ledger.ndjson) for the ledger
   invariants (harness.probe.ledger_checks);
4. judges (harness.probe.checker), fills the conformance table and writes the run
   directory: config.json, plan, history/, faults.jsonl, final-reads.jsonl,
   locust/, result.json, junit.xml, report.html.

Exit codes as everywhere in the harness: 0 pass, 1 violation, 2 the harness failed
(a HarnessError), 3 inconclusive.
"""

from __future__ import annotations

import os
import secrets
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson
import requests

from harness.errors import HarnessError
from harness.exit_codes import VERDICT_EXIT_CODES
from harness.history import Client, SharedHistory, history_files, iter_operations
from harness.load.locust_process import LocustProcess
from harness.load.settings import STOP_FILE_ENV
from harness.names import FAULT_LOG
from harness.nemesis.explorer import Exploration, ExploreSpec, attribute
from harness.nemesis.plans import (
    FaultWindow,
    NemesisRunner,
    Plan,
)
from harness.probe.aged_retries import aged_retries
from harness.probe.answers import CONFIG_ENV, HISTORY_ENV, json_pointer
from harness.probe.checker import DEFAULT_MIN_ACKNOWLEDGED, ProbeCheck, check, verdict_of
from harness.probe.clocks import clock_targets
from harness.probe.config import ProbeConfig
from harness.probe.conformance import DRAFT, ConformanceRow, conformance, rows_to_dicts
from harness.probe.effect_checks import EffectRecord
from harness.probe.effects import EFFECTS_FILE, collect_effects
from harness.probe.explore import ProbeExplorer, coverage_line
from harness.probe.identities import READ_AS_OTHER, other_identity, owners, request_headers
from harness.probe.late_retries import late_retries
from harness.probe.ledger_checks import check_ledger, combine_ledger
from harness.probe.ledger_checks import rows_to_dicts as ledger_rows_to_dicts
from harness.probe.levels import apply_levels, require_should_rows
from harness.probe.messages.checks import check_messages, combine
from harness.probe.messages.play import MessageOutcome, MessagePlay
from harness.probe.plan_targets import ProbeTargets, load_probe_plan, probe_windows
from harness.probe.provider.plan import bind_provider_faults
from harness.probe.replays import held_until
from harness.probe.rig import ProbeRig
from harness.probe.webhooks.checks import check_webhooks, receiver_clock_spans
from harness.probe.webhooks.checks import combine as combine_webhooks
from harness.probe.webhooks.conformance import receiver_rows
from harness.probe.webhooks.play import WebhookOutcome, WebhookPlay
from harness.provider.records import LedgerRecord
from harness.report.junit import write_junit

PLAN_PROXY = "app"  # how a plan names the probe's proxy
MAX_FINAL_READS = 400  # per endpoint and kind: bounded time after the load
FINAL_READ_TIMEOUT = 2.0
FINAL_READS_BUDGET = 30.0  # seconds for all final reads together
FINAL_READ_THREADS = 4  # reads at a time (`final_reads`)
LOCUST_GRACE = 30.0
WATCH_INTERVAL = 0.5  # how often the service is checked while the load runs
LOCUST_START = 20.0  # at most this long from Locust's start to its users' start
EXPLORE_SLACK = 5.0  # seconds of load beyond an exploration's own bound (the last restart)
LOAD_STARTED = b"Ramping to "  # Locust's log line when it starts its users (and its run time)


class ProbeError(HarnessError):
    """The probe could not do its job (upstream unreachable, Locust failed, a fault
    could not be applied)."""


@dataclass(frozen=True)
class ProbeSpec:
    config: ProbeConfig
    out_dir: Path
    upstream: str | None = None  # overrides config.upstream
    toxiproxy_url: str | None = None  # a real Toxiproxy; None = the embedded one
    plan: Path | None = None  # overrides config.plan
    min_acknowledged: int = DEFAULT_MIN_ACKNOWLEDGED


@dataclass(frozen=True)
class ProbeResult:
    verdict: str
    exit_code: int
    run_dir: Path
    check: ProbeCheck
    conformance: tuple[ConformanceRow, ...]
    document: Mapping[str, Any]

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    @property
    def violations(self) -> list[dict[str, Any]]:
        return self.check.violations

    def summary(self) -> str:
        failed = [inv.name for inv in self.check.invariants if not inv.passed]
        if self.verdict == "pass":
            head = f"PASS: all {len(self.check.invariants)} probe invariants held"
        elif self.verdict == "fail":
            # A violation decides the verdict, but what the run could not judge is still said:
            # result.json names the same reasons, and the line must not hide them.
            head = f"FAIL: {', '.join(failed)} violated" + (
                f"; also inconclusive: {'; '.join(self.check.inconclusive_reasons)}"
                if self.check.inconclusive_reasons else "")
        else:
            head = "INCONCLUSIVE: " + "; ".join(self.check.inconclusive_reasons)
        return f"{head}{self._advice()} ({', '.join(self._played())}) — report: {self.run_dir / 'report.html'}"

    def _advice(self) -> str:
        """The advice by rule and level, e.g. '; advice: missing-400 (SHOULD)': what a
        passing service may improve (its messages are in result.json and report.html)."""
        if not self.check.advice:
            return ""
        return "; advice: " + ", ".join(f"{item.rule} ({item.level})" for item in self.check.advice)

    def _played(self) -> list[str]:
        """What the run played, by kind: the requests (when any were made, or nothing
        else was played), the messages (published, confirmed, redelivered by the
        broker's own count) and the webhook deliveries (acknowledged, facts delivered
        more than once), so a messages- or webhooks-only run does not read as requests."""
        counts = self.check.counts
        played = []
        # `kinds` counts the requests by kind; a webhooks-only run's `operations` are its deliveries.
        requests = sum(counts["kinds"].values()) if isinstance(counts.get("kinds"), dict) else counts.get("operations")
        if requests or not ({"messages", "webhooks"} & set(counts)):
            played.append(f"{counts['operations']} requests, {counts['acknowledged']} acknowledged, "
                          f"{counts['duplicated_keys']} keys duplicated")
        if "messages" in counts:
            played.append(f"{counts['publishes']} messages published, {counts.get('confirmed', 0)} confirmed, "
                          f"{counts['redeliveries']} redelivered")
        if "webhooks" in counts:
            played.append(f"{counts['deliveries']} webhook deliveries, {counts['deliveries_acknowledged']} "
                          f"acknowledged, {counts.get('facts_delivered_again', 0)} facts delivered more than once")
        return played


def plan_windows(plan: Plan, duration: float, proxy_name: str) -> list[FaultWindow]:
    """The plan's windows for a probe of a service it does not run, aimed at the proxy
    `proxy_name`; PlanError for a window it cannot carry out (a process fault, another
    proxy). With `service:` or `dependencies:`, see harness.probe.plan_targets."""
    return probe_windows(plan, duration, ProbeTargets(proxies={PLAN_PROXY: proxy_name}))


def run_probe(spec: ProbeSpec) -> ProbeResult:
    config = spec.config
    if config.service is not None and spec.upstream:
        raise ProbeError("--upstream: not with `service:` in the config: the probe runs the service "
                         "on 127.0.0.1:{port} and that is the upstream")
    upstream = spec.upstream or config.upstream
    if config.service is None and not upstream:
        raise ProbeError("no upstream: give --upstream host:port or `upstream:` in the config")
    require_should_rows(config)
    plan_path = spec.plan or config.plan
    targets = ProbeTargets.plain((*config.dependencies, *(["provider"] if config.provider else [])),
                                 service=config.service is not None,
                                 brokers=(*(m.spec.process.name for m in config.messages if m.spec.process),
                                          *config.dependency_processes),
                                 started=tuple(name for name, process in config.dependency_processes.items()
                                               if process.clock is not None),
                                 protocols=config.dependency_protocols)
    plan = load_probe_plan(plan_path, targets) if plan_path is not None else None
    run_dir = Path(spec.out_dir)
    if (run_dir / "history").exists() or (run_dir / "result.json").exists():
        # Two runs' histories in one directory would be judged as one run.
        raise ProbeError(f"{run_dir} already holds a probe run; give another --out")
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_bytes(orjson.dumps(config.to_dict(), option=orjson.OPT_INDENT_2))
    if plan_path is not None:
        (run_dir / "plan.yaml").write_bytes(Path(plan_path).read_bytes())
    started = time.time()
    # The seed fixes what is played; the nonce makes its ids and values this run's own
    # (a rerun with the seed against the same database must not find its facts taken).
    nonce = secrets.token_hex(6)
    # The service and its dependency proxies stay up for the final reads and the
    # effects: the rig is left only after them.
    with (ProbeRig(config, run_dir, upstream=upstream, toxiproxy_url=spec.toxiproxy_url,
                   clocks=clock_targets(plan)) as rig,
          MessagePlay(config.messages, run_dir, seed=config.load.seed, nonce=nonce,
                      duration=config.load.duration) as play,
          WebhookPlay(config.webhooks, run_dir, seed=config.load.seed, nonce=nonce, duration=config.load.duration,
                      on_event=rig.provider.adopt_event if rig.provider is not None else None) as hooks):
        windows = probe_windows(plan, config.load.duration, rig.targets) if plan is not None else []
        windows = bind_provider_faults(windows, rig.provider.control() if rig.provider is not None else None)
        exploration = _load(spec, run_dir, rig, windows, play, hooks,
                            explore=plan.explore if plan is not None else None)
        rig.heal()
        rig.check()
        upstream = rig.upstream
        # What never succeeded is retried once more, now that the service is well.
        late_retries(config, upstream, list(iter_operations(history_files(run_dir / "history"))),
                     run_dir / "history", not_before=held_until(_fault_log(run_dir / FAULT_LOG)))
        if plan is not None and plan.aged_retries is not None:
            # Keys aged on the service's clock (harness.probe.aged_retries), sent again.
            aged = aged_retries(config, upstream, list(iter_operations(history_files(run_dir / "history"))),
                                plan.aged_retries, rig.clocks, run_dir, run_dir / FAULT_LOG)
            for note in aged.notes():
                print(f"harness probe: {note}", file=sys.stderr)
        # The provider's late retries (harness.probe.webhooks.play), then each fact's effects.
        webhooks = hooks.finish(upstream, config.headers)
        operations = list(iter_operations(history_files(run_dir / "history")))
        reads = final_reads(config, upstream, operations, run_dir / "final-reads.jsonl")
        effects = (collect_effects(config, upstream, operations, run_dir / EFFECTS_FILE)
                   if any(endpoint.effects for endpoint in config.endpoints) else [])
        messages = play.finish(upstream)  # the drain: the consumer still runs, every fault healed
        ledger = rig.provider.export() if rig.provider is not None else None  # ledger.ndjson
    return judge(config, operations, reads, run_dir, upstream=upstream, plan_path=plan_path, nonce=nonce,
                 started=started, min_acknowledged=spec.min_acknowledged,
                 toxiproxy=rig.toxiproxy, effects=effects, messages=messages, webhooks=webhooks, ledger=ledger,
                 exploration=exploration)


def _explorer(spec: ProbeSpec, run_dir: Path, rig: ProbeRig, explore: ExploreSpec) -> ProbeExplorer:
    """The plan's `explore:` on the run's dependency proxies (checked before the run:
    a service, dependencies, each with its protocol)."""
    assert rig.nemesis is not None and rig.service is not None
    proxies = {name: real for name, real in rig.targets.proxies.items()
               if name in spec.config.dependency_protocols}
    return ProbeExplorer(api_url=rig.nemesis.api_url, proxies=proxies, protocols=spec.config.dependency_protocols,
                         service=rig.service, spec=explore, seed=spec.config.load.seed, fault_log=run_dir / FAULT_LOG)


def _load(spec: ProbeSpec, run_dir: Path, rig: ProbeRig, windows: list[FaultWindow], play: MessagePlay,
          hooks: WebhookPlay | None = None, *, explore: ExploreSpec | None = None) -> Exploration | None:
    load = spec.config.load
    config_json = run_dir / "config.json"
    env = {**os.environ, CONFIG_ENV: str(config_json.resolve()),
           HISTORY_ENV: str((run_dir / "history").resolve())}
    duration = load.duration
    stop_file = run_dir / "locust" / "explored"
    if explore is not None:
        # The load lasts as long as the exploration (at most its budget and one crash
        # more), at least load.duration; it ends once the explorer is done (STOP_FILE_ENV).
        duration = max(load.duration, explore.learn + explore.budget + explore.wait + explore.settle
                       + EXPLORE_SLACK)
        env[STOP_FILE_ENV] = str(stop_file.resolve())
    locust = LocustProcess(
        locustfile=Path(__file__).with_name("locustfile.py"), host=rig.proxy_url, users=load.users,
        spawn_rate=load.spawn_rate, duration=duration, processes=1, output_dir=run_dir / "locust",
        env=env, stop_timeout=max(2.0, load.client_timeout * 2), guard=rig.guard)
    assert rig.nemesis is not None
    runner = NemesisRunner(rig.nemesis, rig.processes, run_dir / FAULT_LOG, clocks=rig.clocks,
                           children=rig.processes)
    play.setup(rig.upstream)  # the queues exist, and the facts have no effect yet, before the first publish
    if spec.config.endpoints:
        locust.start()
        # The plan's clock starts with the load (Locust's run time), not with the Locust
        # process (its start takes seconds on a busy machine), so a window at 0.5 s meets
        # requests and the last windows still fall inside the load.
        _wait_load_started(locust)
    play.start()
    if hooks is not None:
        hooks.start(rig.proxy_url)  # the webhooks: through the proxy `app`, like the requests
    runner.start(windows)
    explorer = _explorer(spec, run_dir, rig, explore) if explore is not None else None
    exploration = None
    load_started = time.monotonic()
    deadline = load_started + duration + LOCUST_GRACE + load.client_timeout * 4
    try:
        if explorer is not None:
            explorer.start()
        # A service that ends on its own ends the run (rig.check raises) at once.
        while not (finished := (locust.finished(timeout=WATCH_INTERVAL) if spec.config.endpoints
                                else play.load_over(WATCH_INTERVAL))) and time.monotonic() < deadline:
            rig.check()
            if explorer is not None and explorer.error is not None:
                break  # the explorer failed (exit 2): finish() raises its error
            if (explorer is not None and not explorer.running and not stop_file.exists()
                    and time.monotonic() - load_started >= load.duration):
                stop_file.parent.mkdir(parents=True, exist_ok=True)
                stop_file.touch()  # explored: the load ends (harness.load.run_time)
    finally:
        try:
            if explorer is not None:
                exploration = explorer.finish()  # nothing left armed, stopped or dead
        finally:
            _stop_load(runner, locust, play, hooks)
    _load_ended(runner, locust, finished)
    return exploration


def _stop_load(runner: NemesisRunner, locust: LocustProcess, play: MessagePlay, hooks: WebhookPlay | None) -> None:
    runner.stop()
    locust.stop()
    try:
        play.stop()
    finally:
        if hooks is not None:
            hooks.stop()


def _load_ended(runner: NemesisRunner, locust: LocustProcess, finished: bool) -> None:
    if not finished:
        raise ProbeError(f"Locust did not finish in time; see {locust.log_path}")
    if runner.failure:
        raise ProbeError(f"fault plan: {runner.failure}")
    if locust.returncode not in (0, None):
        tail = locust.log_path.read_text(errors="replace")[-1500:] if locust.log_path.exists() else ""
        raise ProbeError(f"Locust exited with {locust.returncode}; end of {locust.log_path}:\n{tail}")


def _wait_load_started(locust: LocustProcess) -> None:
    """Return once Locust starts its users, the moment its run time starts counting
    (its log's `Ramping to N users`), or when Locust ended, or after LOCUST_START
    seconds (the plan then runs without that alignment)."""
    deadline = time.monotonic() + LOCUST_START
    while time.monotonic() < deadline and not locust.finished(timeout=0.05):
        try:
            if LOAD_STARTED in locust.log_path.read_bytes():
                return
        except OSError:
            pass  # not written yet


def final_reads(config: ProbeConfig, upstream: str, operations: Sequence[Mapping[str, Any]],
                path: Path) -> list[dict[str, Any]]:
    """Read back every acknowledged resource (`read`) and search every key (`search`),
    straight from the upstream, bounded in count and time; recorded in `path`.

    The reads go FINAL_READ_THREADS at a time, each thread a client of its own (one
    logical process, one kept-alive connection): one after another, each on a new
    connection, 804 reads of the PostgreSQL example took 7.6 s, most of a short run's
    time after its load. The checker reads them by kind and resource, not by order."""
    deadline = time.monotonic() + FINAL_READS_BUDGET
    base = f"http://{upstream}"
    reads: list[FinalRead] = []
    for endpoint in config.endpoints:
        ops = [op for op in operations if op.get("endpoint") == endpoint.name]
        if endpoint.read is not None:
            # Each resource as its owner (the identity whose answer named it first) and,
            # with identities, as another one, which must not get it.
            ids: dict[str, tuple[str | None, int | None]] = {}
            first = owners(ops)  # the identity whose answer named it first: its creator
            for op in ops:
                if op.get("type") == "ok" and op.get("resource_id") is not None:
                    ids.setdefault(str(op["resource_id"]), (op.get("idempotency_key"),
                                                           first.get((endpoint.name, str(op["resource_id"])))))
            for resource_id, (key, owner) in list(ids.items())[:MAX_FINAL_READS]:
                url = base + endpoint.read.path.replace("{id}", quote(resource_id, safe=""))
                reads.append(FinalRead(url, request_headers(config, endpoint, owner), endpoint=endpoint.name,
                                       kind="by_id", resource_id=resource_id, key=key, identity=owner))
                stranger = other_identity(config, owner)
                if stranger is not None:
                    reads.append(FinalRead(url, request_headers(config, endpoint, stranger), endpoint=endpoint.name,
                                           kind=READ_AS_OTHER, resource_id=resource_id, key=key,
                                           identity=stranger, owner=owner))
        if endpoint.search is not None:
            senders = sorted({(str(op["idempotency_key"]), op.get("identity") or 0) for op in ops
                              if op.get("idempotency_key")})
            for key, identity in senders[:MAX_FINAL_READS]:
                who = identity if config.identities else None
                url = base + endpoint.search.path.replace("{key}", quote(key, safe=""))
                reads.append(FinalRead(url, request_headers(config, endpoint, who), endpoint=endpoint.name,
                                       kind="by_key", resource_id=None, key=key, items=endpoint.search.items,
                                       identity=who))
    sessions = threading.local()  # a kept-alive connection per thread
    with SharedHistory(path, worker="final") as history:

        def read_one(read: FinalRead) -> None:
            if time.monotonic() > deadline:
                return
            session: requests.Session | None = getattr(sessions, "session", None)
            if session is None:
                session = sessions.session = requests.Session()
            _read(history.client(), session, read)

        with ThreadPoolExecutor(max_workers=FINAL_READ_THREADS, thread_name_prefix="final-read") as pool:
            for done in [pool.submit(read_one, read) for read in reads]:
                done.result()
    return [op for op in iter_operations([path]) if op.get("op") == "read_order"]


@dataclass(frozen=True)
class FinalRead:
    """One read after the load: the URL, as whom, and what the history records of it."""

    url: str
    headers: Mapping[str, str]
    endpoint: str
    kind: str
    resource_id: str | None
    key: str | None
    items: str | None = None
    identity: int | None = None
    owner: int | None = None


def _read(client: Client, session: requests.Session, read: FinalRead) -> None:
    who: dict[str, Any] = {name: value for name, value in (("identity", read.identity), ("owner", read.owner))
                           if value is not None}
    operation = client.invoke("read_order", endpoint=read.endpoint, read=read.kind, resource_id=read.resource_id,
                              idempotency_key=read.key, url=read.url, **who)
    try:
        response = session.get(read.url, headers=dict(read.headers), timeout=FINAL_READ_TIMEOUT)
    except requests.RequestException as error:
        operation.info(error=f"{type(error).__name__}: {error}"[:300])
        return
    fields: dict[str, Any] = {"status": response.status_code}
    if read.items is not None and response.status_code < 300:
        try:
            found = json_pointer(response.json(), read.items)
        except ValueError:
            found = None
        fields["found"] = [_identity(item) for item in found] if isinstance(found, list) else None
    if response.status_code < 500:
        (operation.ok if response.status_code < 300 else operation.fail)(**fields)
    else:
        operation.info(error=f"HTTP {response.status_code}", **fields)


def _identity(item: Any) -> Any:
    if isinstance(item, dict):
        return item.get("id", item)
    return item


def judge(config: ProbeConfig, operations: Sequence[Mapping[str, Any]], reads: Sequence[Mapping[str, Any]],
          run_dir: Path, *, upstream: str, plan_path: Path | None, started: float, nonce: str | None = None,
          min_acknowledged: int, toxiproxy: str, effects: Sequence[EffectRecord] = (),
          messages: Sequence[MessageOutcome] | None = None, webhooks: Sequence[WebhookOutcome] | None = None,
          ledger: Sequence[LedgerRecord] | None = None, exploration: Exploration | None = None) -> ProbeResult:
    """Check, build the conformance table and write result.json, junit.xml, report.html."""
    from harness.probe.report import write_report

    faults = _fault_log(run_dir / FAULT_LOG)
    result = check(operations, config, reads=reads, min_acknowledged=min_acknowledged, effects=effects,
                   faults=faults)
    rows = conformance(result, operations, requires_key=any(e.requires_key for e in config.endpoints),
                       read_back=any(e.read or e.search for e in config.endpoints)) if config.endpoints else []
    # The draft's levels: failed SHOULD rows are advice, or failures when the run is strict.
    result = apply_levels(result, rows, strict=config.strict)
    if messages is not None:  # with `messages:` (harness.probe.messages.checks)
        result = combine(result, check_messages(operations, messages), endpoints=bool(config.endpoints))
    if webhooks is not None:  # with `webhooks:` (harness.probe.webhooks.checks)
        hooks_check = check_webhooks(operations, webhooks, config.webhooks, min_acknowledged=min_acknowledged,
                                     receiver_clock=receiver_clock_spans(faults))
        result = combine_webhooks(result, hooks_check, keep=bool(config.endpoints or config.messages))
        rows = [*rows, *receiver_rows(hooks_check, faults)]
    ledger_rows: list[dict[str, Any]] | None = None
    if ledger is not None:  # with `provider:` (harness.probe.ledger_checks)
        ledger_check = check_ledger(operations, config, ledger)
        result, ledger_rows = combine_ledger(result, ledger_check), ledger_rows_to_dicts(ledger_check.rows)
    explored: dict[str, Any] | None = None
    if exploration is not None:  # a plan's `explore:` (harness.probe.explore)
        placed = attribute(exploration, result.violations, operations, grace=config.load.client_timeout)
        reasons = [*result.inconclusive_reasons, *exploration.reasons()]
        result = replace(result, inconclusive_reasons=reasons, verdict=verdict_of(result.invariants, reasons))
        line = coverage_line(exploration)
        with open(run_dir / FAULT_LOG, "ab") as log:
            log.write(orjson.dumps(line, option=orjson.OPT_APPEND_NEWLINE))
        faults = [*faults, line]
        explored = {**exploration.to_dict(), "violations": placed}
    document = {
        "kind": "probe",
        "run_id": run_dir.name,
        "scenario": "probe",
        "upstream": upstream,
        "toxiproxy": toxiproxy,
        "profile": config.profile,
        "strict": config.strict,
        "plan": str(plan_path) if plan_path else None,
        "started": started,
        "finished": time.time(),
        "load": {"users": config.load.users, "duration": config.load.duration, "seed": config.load.seed,
                 "client_timeout": config.load.client_timeout, **({"nonce": nonce} if nonce else {})},
        "endpoints": [{"name": e.name, "method": e.method, "path": e.path} for e in config.endpoints],
        **({"webhooks": [{"name": w.spec.name, "scheme": w.spec.scheme, "path": w.spec.path}
                         for w in config.webhooks]} if config.webhooks else {}),
        **({"identities": len(config.identities)} if config.identities else {}),
        **result.to_dict(),
        "draft": DRAFT,
        "conformance": rows_to_dicts(rows),
        "faults": faults,
        **({"ledger": ledger_rows} if ledger_rows is not None else {}),
        **({"explore": explored} if explored is not None else {}),
    }
    (run_dir / "result.json").write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2))
    write_junit(run_dir / "junit.xml", document)
    write_report(run_dir / "report.html", document)
    return ProbeResult(verdict=result.verdict, exit_code=VERDICT_EXIT_CODES[result.verdict], run_dir=run_dir,
                       check=result, conformance=tuple(rows), document=document)


def _fault_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
