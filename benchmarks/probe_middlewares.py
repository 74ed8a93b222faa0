"""Probe real Idempotency-Key middlewares from PyPI under one plan; publish the table.

Each middleware runs in the smallest app its README describes (benchmarks/middleware_apps/;
the FastAPI ones are examples/real-world/'s, which the real-world suite probes too),
each in its own throwaway virtualenv, so none of them becomes a dependency of this
project. The probe (this project's venv) puts the embedded Toxiproxy in front of each
app and runs the same load with two identities (`Authorization: Bearer alice` and
`Bearer bob`, who reuse each other's keys; each app lets a user read only their own
payments); the results go to benchmarks/results/probe_middlewares.md (and each run
directory under --out). An app whose middleware has a dependency of its own (Redis,
for flask-idempotent) is started by the probe (`service:`) with that Redis and the
app's own database (another Redis) behind proxies (`dependencies:`), under
benchmarks/middleware_apps/probe-app-database.yaml: the app's database fails while
the middleware's store is well (the handler's 500), then both, then the app is killed.
The others run under --plan (harness/plans/probe.yaml: the client's network).

Install the virtualenvs once (ordinary pip, from PyPI), then run:

    .venv/bin/python benchmarks/probe_middlewares.py --install     # creates --venvs/<name>
    .venv/bin/python benchmarks/probe_middlewares.py               # probes, writes the table

By hand, per middleware (what --install does):

    python3 -m venv /tmp/harness-probe-middlewares/fastapi-idempotency-key
    /tmp/harness-probe-middlewares/fastapi-idempotency-key/bin/pip install fastapi-idempotency-key fastapi uvicorn
    python3 -m venv /tmp/harness-probe-middlewares/fastapi-idempotency
    /tmp/harness-probe-middlewares/fastapi-idempotency/bin/pip install fastapi-idempotency fastapi uvicorn
    python3 -m venv /tmp/harness-probe-middlewares/django-idempotency-key
    /tmp/harness-probe-middlewares/django-idempotency-key/bin/pip install django-idempotency-key
    python3 -m venv /tmp/harness-probe-middlewares/flask-idempotent
    /tmp/harness-probe-middlewares/flask-idempotent/bin/pip install flask-idempotent 'flask<2.3' 'werkzeug<2.3' 'jinja2<3.1' six

This is a benchmark, not a test: it reports what these packages do today, and
their behaviour may change with any release.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.history import history_files, iter_operations  # noqa: E402
from harness.ports import free_port  # noqa: E402
from harness.probe.config import parse_config  # noqa: E402
from harness.probe.conformance import REQUIREMENTS  # noqa: E402
from harness.probe.runner import ProbeResult, ProbeSpec, run_probe  # noqa: E402
from harness.stack.redis_server import RedisServer  # noqa: E402

APPS = Path(__file__).resolve().parent / "middleware_apps"
# The FastAPI middlewares' apps are the real-world suite's (tests/real_world/): one copy.
REAL_WORLD = Path(__file__).resolve().parents[1] / "examples" / "real-world"


@dataclass(frozen=True)
class Middleware:
    name: str
    framework: str
    app: Path
    packages: tuple[str, ...]
    key_header: str = "Idempotency-Key"
    requires_key: bool = True
    needs_redis: bool = False
    notes: str = ""


MIDDLEWARES = (
    Middleware("fastapi-idempotency-key", "FastAPI", REAL_WORLD / "fastapi_idempotency_key_app.py",
               ("fastapi-idempotency-key", "fastapi", "uvicorn"),
               notes="memory backend, `required=True`"),
    Middleware("fastapi-idempotency", "FastAPI / Starlette", REAL_WORLD / "fastapi_idempotency_app.py",
               ("fastapi-idempotency", "fastapi", "uvicorn"), requires_key=False,
               notes="default in-memory store; the key is optional"),
    Middleware("django-idempotency-key", "Django", APPS / "django_idempotency_key_app.py",
               ("django-idempotency-key",), notes="IdempotencyKeyMiddleware, default settings"),
    Middleware("flask-idempotent", "Flask", APPS / "flask_idempotent_app.py",
               ("flask-idempotent", "flask<2.3", "werkzeug<2.3", "jinja2<3.1", "six"),
               key_header="X-Idempotent-Key", requires_key=False, needs_redis=True,
               notes="Redis lock and store; header `X-Idempotent-Key`; the key is optional"),
)


@dataclass
class Outcome:
    middleware: Middleware
    version: str
    result: ProbeResult | None = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def install(venvs: Path) -> None:
    for middleware in MIDDLEWARES:
        venv = venvs / middleware.name
        if not (venv / "bin" / "python").exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", *middleware.packages], check=True)


def version_of(venv: Path, package: str) -> str:
    done = subprocess.run([str(venv / "bin" / "pip"), "show", package], capture_output=True, text=True)
    for line in done.stdout.splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
    return "?"


IDENTITIES = [{"Authorization": "Bearer alice"}, {"Authorization": "Bearer bob"}]
DEPENDENCY_PLAN = APPS / "probe-app-database.yaml"


def probe_config(middleware: Middleware, args: argparse.Namespace, *, python: Path | None = None,
                 redis_address: str | None = None, db_address: str | None = None):
    service: dict[str, Any] = {}
    if redis_address is not None and python is not None:
        # The probe starts the app on {port}: the middleware's Redis behind the proxy
        # `redis`, the app's own database (another Redis) behind the proxy `db`.
        service = {"service": {"command": [str(python), str(middleware.app), "{port}",
                                           "redis://{dependency.redis}/0", "redis://{dependency.db}/0"],
                               "ready": {"path": "/healthz", "timeout": "30s"}},
                   "dependencies": {"redis": redis_address, "db": db_address}}
    return parse_config({
        **service,
        "profile": "ietf",
        "identities": IDENTITIES,
        "key_header": middleware.key_header,
        "endpoints": [{
            "name": "create-payment", "path": "/payments",
            "body": {"amount": "{int:100-99999}", "reference": "{uuid}"}, "mutate": "amount",
            "id": {"pointer": "/id"}, "read": {"path": "/payments/{id}"},
            "requires_key": middleware.requires_key,
        }],
        "load": {"users": args.users, "duration": args.duration, "seed": args.seed, "client_timeout": "1s"},
    }, source=middleware.name)


def wait_healthy(address: str, process: subprocess.Popen, log: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if requests.get(f"http://{address}/healthz", timeout=1).status_code == 200:
                return
        except requests.RequestException:
            time.sleep(0.2)
    raise RuntimeError(f"the app did not come up:\n{log.read_text(errors='replace')[-1500:]}")


def probe_one(middleware: Middleware, args: argparse.Namespace, work: Path) -> Outcome:
    venv = args.venvs / middleware.name
    python = venv / "bin" / "python"
    if not python.exists():
        return Outcome(middleware, "-", error=f"no venv at {venv}: run with --install (see --help)")
    outcome = Outcome(middleware, version_of(venv, middleware.name))
    if middleware.needs_redis:
        redis = RedisServer(data_dir=work / f"redis-{middleware.name}", appendonly=False)
        database = RedisServer(data_dir=work / f"db-{middleware.name}", appendonly=False)
        redis.start()
        database.start()
        try:
            outcome.extra["plan"] = DEPENDENCY_PLAN
            outcome.result = run_probe(ProbeSpec(
                config=probe_config(middleware, args, python=python, redis_address=_address(redis.url),
                                    db_address=_address(database.url)),
                out_dir=args.out / middleware.name, plan=DEPENDENCY_PLAN))
        except Exception as error:  # noqa: BLE001 - one broken package must not hide the others
            outcome.error = f"{type(error).__name__}: {str(error).splitlines()[0]}"
        finally:
            redis.stop()
            database.stop()
        return outcome
    port = free_port()
    command = [str(python), str(middleware.app), str(port)]
    log = work / f"{middleware.name}.log"
    with open(log, "wb") as handle:
        process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_healthy(f"127.0.0.1:{port}", process, log)
        outcome.result = run_probe(ProbeSpec(config=probe_config(middleware, args),
                                             out_dir=args.out / middleware.name, upstream=f"127.0.0.1:{port}",
                                             plan=args.plan))
    except Exception as error:  # noqa: BLE001 - one broken package must not hide the others
        outcome.error = f"{type(error).__name__}: {str(error).splitlines()[0]}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return outcome


def _address(url: str) -> str:
    """host:port of a redis:// URL."""
    return url.split("://", 1)[1].split("/", 1)[0]


def keys_with_two_resources(run_dir: Path) -> int:
    """Keys whose same-payload requests named more than one resource: a concurrency
    bug, told apart from a reuse with another payload that created a second one."""
    ids: dict[str, set[str]] = {}
    for op in iter_operations(history_files(run_dir / "history")):
        if op["type"] == "ok" and op.get("expect") != "payload_mismatch" and op.get("idempotency_key"):
            ids.setdefault(op["idempotency_key"], set()).add(str(op.get("resource_id")))
    return sum(1 for found in ids.values() if len(found) > 1)


def markdown(outcomes: list[Outcome], args: argparse.Namespace) -> str:
    lines = [
        "# Idempotency-Key middlewares from PyPI under `harness probe`",
        "",
        f"Command: `.venv/bin/python benchmarks/probe_middlewares.py --duration {args.duration:g}s "
        f"--users {args.users} --seed {args.seed}` (plan `{args.plan.relative_to(ROOT) if args.plan.is_relative_to(ROOT) else args.plan}`), "
        f"{time.strftime('%Y-%m-%d')}. Each package in the smallest app its README describes "
        "(benchmarks/middleware_apps/), a handler that takes 30 ms, probed with the same load and two "
        "identities (alice and bob reuse each other's keys); an app with a dependency of its own "
        "(flask-idempotent's Redis) is started by the probe, its own database failing "
        "(`benchmarks/middleware_apps/probe-app-database.yaml`). "
        "A snapshot of these releases, not a verdict on their future ones.",
        "",
        "| requirement | " + " | ".join(f"{o.middleware.name} {o.version} ({o.middleware.framework})"
                                       for o in outcomes) + " |",
        "|---|" + "---|" * len(outcomes),
    ]
    verdicts = ["**" + (o.result.verdict.upper() if o.result else "not run") + "**" for o in outcomes]
    lines.append("| verdict (all invariants) | " + " | ".join(verdicts) + " |")
    for req in REQUIREMENTS:
        cells = []
        for outcome in outcomes:
            if outcome.result is None:
                cells.append("–")
                continue
            row = next(r for r in outcome.result.conformance if r.id == req.id)
            cells.append(row.status)
        label = f"{req.text} ({req.level}{'' if req.section == 'practice' else ', ' + req.section})"
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "| question | " + " | ".join(o.middleware.name for o in outcomes) + " |",
              "|---|" + "---|" * len(outcomes)]
    for question, cell in (("leaks across users (`identities_isolated`)", _leaks),
                           ("replays a 5xx (`no-5xx-replay`)", _replays_5xx),
                           ("a key stuck after a failure (late retries)", _stuck)):
        lines.append(f"| {question} | " + " | ".join(cell(o) if o.result else "–" for o in outcomes) + " |")
    lines += ["", "## Evidence", ""]
    for outcome in outcomes:
        middleware = outcome.middleware
        lines.append(f"### {middleware.name} {outcome.version} ({middleware.framework}; {middleware.notes})")
        lines.append("")
        if outcome.result is None:
            lines += [f"Not run: {outcome.error}", ""]
            continue
        lines.append(f"`{outcome.result.summary().split(' — report:')[0]}`")
        lines.append("")
        plan = Path(outcome.extra.get("plan") or args.plan)
        lines.append(f"- plan: `{plan.relative_to(ROOT) if plan.is_relative_to(ROOT) else plan}`"
                     + (" (the app started by the probe, Redis behind a dependency proxy)"
                        if outcome.extra.get("plan") else " (the app started by this script)"))
        raced = keys_with_two_resources(outcome.result.run_dir)
        lines.append(f"- keys whose *same* payload got two or more resources (the race, apart from "
                     f"payload mismatches): {raced}")
        for row in outcome.result.conformance:
            lines.append(f"- **{row.status}** — {row.requirement}: {row.evidence}")
        failed = [inv for inv in outcome.result.check.invariants if not inv.passed]
        for inv in failed:
            first = inv.violations[0]["message"] if inv.violations else ""
            lines.append(f"- invariant `{inv.name}` violated {inv.violation_count}×, e.g. {first}")
        lines.append("")
    return "\n".join(lines) + "\n"


def _invariant(outcome: Outcome, name: str) -> Any:
    assert outcome.result is not None
    return next((inv for inv in outcome.result.check.invariants if inv.name == name), None)


def _leaks(outcome: Outcome) -> str:
    inv = _invariant(outcome, "identities_isolated")
    return "not checked" if inv is None else (f"**yes**: {inv.violation_count} resources or reads"
                                              if not inv.passed else "no")


def _replays_5xx(outcome: Outcome) -> str:
    assert outcome.result is not None
    row = next(r for r in outcome.result.conformance if r.id == "no-5xx-replay")
    return {"fail": "**yes**", "pass": "no (5xx seen, none replayed)"}.get(row.status, row.status)


def _stuck(outcome: Outcome) -> str:
    inv = _invariant(outcome, "in_flight_refused_or_waited")
    stuck = [v for v in (inv.violations if inv else []) if "stuck" in v["message"]]
    if not stuck:
        return "no"
    how = "no answer" if "no answer" in stuck[0]["message"] else "409"
    return f"**yes**: {len(stuck)}{'+' if len(stuck) == 25 else ''} keys ({how})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--venvs", type=Path, default=Path(tempfile.gettempdir()) / "harness-probe-middlewares",
                        help="where the throwaway virtualenvs are (default /tmp/harness-probe-middlewares)")
    parser.add_argument("--install", action="store_true", help="create the virtualenvs and pip install first")
    parser.add_argument("--only", action="append", help="probe only this middleware (repeatable)")
    parser.add_argument("--duration", type=float, default=8.0, help="seconds of load per middleware (default 8)")
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--plan", type=Path, default=ROOT / "harness" / "plans" / "probe.yaml")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / f"middlewares-{time.strftime('%Y%m%d-%H%M%S')}",
                        help="run directories go here, one per middleware (default runs/middlewares-<time>)")
    parser.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results" / "probe_middlewares.md")
    args = parser.parse_args(argv)
    if args.install:
        install(args.venvs)
    selected = [m for m in MIDDLEWARES if not args.only or m.name in args.only]
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="probe-middlewares-") as work:
        for middleware in selected:
            outcome = probe_one(middleware, args, Path(work))
            print(f"{middleware.name}: {outcome.result.summary() if outcome.result else outcome.error}", flush=True)
            outcomes.append(outcome)
    text = markdown(outcomes, args)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(text)
    print(f"table written to {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
