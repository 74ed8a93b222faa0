"""Checker benchmark: time and peak memory of `check_run` on large generated runs.

    .venv/bin/python benchmarks/bench_checker.py            # the full table
    .venv/bin/python benchmarks/bench_checker.py --quick    # small sizes, a smoke run
    .venv/bin/python benchmarks/bench_checker.py --row 100000,1,0,0 --repeat 1   # one row
    .venv/bin/python benchmarks/bench_checker.py --compare OLD_TREE   # this checker beside another
    .venv/bin/python benchmarks/bench_checker.py --row 1000000,1,0,0 --repeat 1   # 10^7 operations
    .venv/bin/python benchmarks/bench_checker.py --row 1000000,1,0,0 --repeat 1 --run-dir /tmp/r7  # kept
    .venv/bin/python benchmarks/bench_checker.py --row 3000,1,0,0 --repeat 1 --instructions --compare OLD

The 10^7 row (10^6 orders, 1.1 x 10^7 operations) writes 7.5 GB of history to the
temp directory in about 75 s on the project's VM, then checks it in 1-5 minutes
depending on the machine's load; every other row takes seconds.

`--compare DIR` checks each row with the `harness` package found in DIR as well
(e.g. `git archive HEAD~3 harness | tar -x -C DIR`), alternating the two, so a
change to the checker is measured before and after in one run on one machine.

Each row generates a run directory on disk (history files of 8 load processes and
the matching export of a correct app), then checks it in a fresh subprocess so the
peak RSS (ru_maxrss) belongs to the check alone. Rows vary the number of orders at
a fixed number of operations per order (memory should grow linearly), then keep
the orders and multiply the operations by adding duplicate rounds (memory should
stay flat), then add duplicate payments so the evidence pass runs too.
Results go to benchmarks/results/checker.md by hand.

CPU time is the check's own user + system time from resource.getrusage, not wall
time: the machine is shared, and neighbours stretch wall time far more than CPU.
`--run-dir DIR` keeps the generated run in DIR (generated there when DIR does not
exist yet, reused as it is when it does), so the 10^7 row is generated once and
checked as often as needed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

WORKERS = 8
DUMP = orjson.OPT_APPEND_NEWLINE


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class Writer:
    """Writes invoke/completion pairs the way the load records them, but in big batches."""

    def __init__(self, directory: Path, worker: int) -> None:
        self.handle = open(directory / f"w{worker}-1.jsonl", "wb")
        self.process = f"w{worker}-u1-p0"
        self.incarnation = 0
        self.counter = 0
        self.clock = 1_700_000_000.0 + worker
        self.buffer: list[bytes] = []

    def op(self, op: str, kind: str, invoke: dict, completion: dict) -> None:
        self.counter += 1
        op_id = f"{self.process}:{self.counter}"
        self.clock += 0.01
        self.buffer.append(orjson.dumps(
            {"type": "invoke", "op_id": op_id, "op": op, "tenant": "default", "expect": None,
             **invoke, "time": self.clock, "process": self.process}, option=DUMP))
        if op != "publish":
            # what the HTTP client writes on every completion (docs/internals.md)
            completion = {"status": None, "body_digest": None, "replayed": False, "error": None,
                          "toxic_hit": None, **completion}
        self.buffer.append(orjson.dumps(
            {"type": kind, "op_id": op_id, "op": op, **completion, "time": self.clock + 0.005,
             "process": self.process}, option=DUMP))
        if kind == "info":
            self.incarnation += 1
            self.process = f"{self.process.rsplit('-p', 1)[0]}-p{self.incarnation}"
        if len(self.buffer) >= 20_000:
            self.flush()

    def flush(self) -> None:
        self.handle.write(b"".join(self.buffer))
        self.buffer.clear()

    def close(self) -> None:
        self.flush()
        self.handle.close()


def _must_reject(expect: str, status: int) -> dict:
    return {"expect": expect, "must_reject": True, "reject_status": status}


def generate(run_dir: Path, *, orders: int, rounds: int, duplicates: int = 0, lost: int = 0) -> int:
    """A correct app's run: 7 operations per order plus 4 per duplicate round.

    Records carry what the load records (docs/internals.md): tenant, expect,
    fingerprints, `answer` summaries of ok bodies, `problem_type` of refusals,
    `must_reject` on deliberate refusals. The run directory also gets
    `final_reads.ndjson` (one read per order, agreeing with the export) and one
    invalid dead letter per 1,000 orders, so every invariant has input.
    `duplicates` orders get a second payment the way the domain mutant makes one
    (a webhook with another provider_ref, accepted); `lost` orders lose their
    acknowledged payment. The first fails an export-only invariant, the second
    one that needs the history (so the evidence pass reads the history again).
    """
    histories = run_dir / "histories"
    histories.mkdir(parents=True)
    writers = [Writer(histories, worker) for worker in range(WORKERS)]
    export = open(run_dir / "export.ndjson", "wb")
    reads = open(run_dir / "final_reads.ndjson", "wb")
    effects: list[bytes] = []
    dead_letters: list[bytes] = []
    operations = 0
    for number in range(orders):
        w = writers[number % WORKERS]
        order_id, ref, message = f"ord_{number:08d}", f"pr_{number}", f"msg_{number}"
        created, paid = _digest(f"created {order_id}"), _digest(f"paid {order_id}")
        create = {"idempotency_key": f"ck-{number}", "sku": "sku-1", "quantity": 1,
                  "amount_cents": 1000, "fingerprint": _digest(f"create {number}")}
        pay = {"idempotency_key": f"pk-{number}", "order_id": order_id, "provider_ref": ref,
               "amount_cents": 1000, "fingerprint": _digest(f"pay {number}")}
        webhook = {"order_id": order_id, "provider_ref": ref, "event_id": f"ev-{number}",
                   "amount_cents": 1000, "fingerprint": _digest(f"webhook {number}")}
        publish = {"order_id": order_id, "provider_ref": ref, "message_id": message,
                   "amount_cents": 1000}
        order_answer = {"order_id": order_id, "tenant": "default", "sku": "sku-1", "quantity": 1,
                        "amount_cents": 1000, "status": "INVENTORY_RESERVED",
                        "idempotency_key": f"ck-{number}", "provider_ref": None}
        paid_answer = {"order_id": order_id, "tenant": "default", "status": "PAID", "provider_ref": ref,
                       "amount_cents": 1000, "already_paid": False}
        again_answer = {**paid_answer, "already_paid": True}
        w.op("create_order", "ok", create,
             {"status": 201, "order_id": order_id, "body_digest": created, "answer": order_answer})
        w.op("pay", "info", pay, {"error": "ReadTimeout"})
        w.op("pay", "ok", {**pay, "expect": "retry_after_timeout"},
             {"status": 201, "body_digest": paid, "replayed": True, "answer": paid_answer})
        w.op("pay", "ok", {**pay, "idempotency_key": f"pk2-{number}", "expect": "same_fact_new_id",
                           "fingerprint": _digest(f"pay2 {number}")},
             {"status": 200, "body_digest": paid, "answer": again_answer})
        w.op("pay", "fail", {**pay, "idempotency_key": f"pk3-{number}", "provider_ref": f"px_{number}",
                             "fingerprint": _digest(f"pay3 {number}"), **_must_reject("conflicting_ref", 409)},
             {"status": 409, "body_digest": _digest("conflict"), "problem_type": "/problems/payment-conflict"})
        w.op("webhook", "fail", {**webhook, **_must_reject("tampered_signature", 401)},
             {"status": 401, "body_digest": _digest("signature"),
              "problem_type": "/problems/invalid-signature"})
        w.op("publish", "ok", publish, {})
        operations += 7
        for _ in range(rounds):
            w.op("create_order", "ok", {**create, "expect": "double_click"},
                 {"status": 201, "order_id": order_id, "body_digest": created, "replayed": True,
                  "answer": order_answer})
            w.op("pay", "ok", {**pay, "expect": "retry_after_timeout"},
                 {"status": 201, "body_digest": paid, "replayed": True, "answer": paid_answer})
            w.op("webhook", "ok", {**webhook, "expect": "webhook_burst"},
                 {"status": 200, "body_digest": paid, "answer": again_answer})
            w.op("publish", "ok", {**publish, "expect": "producer_duplicate"}, {})
            operations += 4
        order = {"id": order_id, "tenant": "default", "idempotency_key": f"ck-{number}",
                 "sku": "sku-1", "quantity": 1, "amount_cents": 1000, "currency": "EUR", "status": "PAID",
                 "created_at": 1.0}
        held = []
        export.write(orjson.dumps({"kind": "order", **order}, option=DUMP))
        if number >= lost:
            payment = {"order_id": order_id, "provider_ref": ref, "amount_cents": 1000,
                       "source": "api", "source_id": f"pk-{number}", "applied_at": 2.0}
            held.append(payment)
            export.write(orjson.dumps({"kind": "payment", **payment}, option=DUMP))
        if number < duplicates:
            w.op("webhook", "ok", {**webhook, "provider_ref": f"px_{number}", "event_id": f"ev2-{number}"},
                 {"status": 200, "body_digest": paid, "answer": again_answer})
            operations += 1
            payment = {"order_id": order_id, "provider_ref": f"px_{number}", "amount_cents": 1000,
                       "source": "webhook", "source_id": f"ev2-{number}", "applied_at": 3.0}
            held.append(payment)
            export.write(orjson.dumps({"kind": "payment", **payment}, option=DUMP))
        reads.write(orjson.dumps({"order_id": order_id, "tenant": "default", "status_code": 200,
                                  "order": {**order, "provider_ref": ref, "payments": held}}, option=DUMP))
        effects.append(orjson.dumps(
            {"kind": "message_effect", "message_id": message, "order_id": order_id,
             "provider_ref": ref, "outcome": "already_paid", "at": 3.0}, option=DUMP))
        if number % 1000 == 0:
            dead_letters.append(orjson.dumps(
                {"kind": "dead_letter", "message_id": f"poison-{number}", "entry_id": f"{number}-0",
                 "deliveries": 1, "reason": "no message_id", "order_id": None, "provider_ref": None,
                 "amount_cents": None, "valid": False}, option=DUMP))
    for writer in writers:
        writer.close()
    reads.close()
    export.write(b"".join(effects))
    export.write(orjson.dumps({"kind": "inventory", "sku": "sku-1", "available": 10 * orders,
                               "added_total": 11 * orders}, option=DUMP))
    export.write(b"".join(dead_letters))
    export.write(orjson.dumps(
        {"kind": "counters", "api_replays": orders * (1 + rounds), "api_fingerprint_conflicts": 0,
         "api_inflight_conflicts": 0, "api_recovered": 0, "api_incomplete_bodies": 0,
         "domain_already_paid": orders * (1 + rounds), "domain_conflicts": orders,
         "domain_amount_mismatches": 0, "tenant_refusals": 0, "inbox_duplicates_skipped": orders * rounds,
         "messages_dead_lettered": len(dead_letters), "messages_reclaimed": 0,
         "webhook_bad_signatures": orders}, option=DUMP))
    export.close()
    (run_dir / "faults.jsonl").write_bytes(orjson.dumps(
        {"name": "latency", "kind": "toxic", "target": "app", "start": 1_700_000_000.0,
         "end": 1_700_000_100.0, "error": None}, option=DUMP))
    (run_dir / "settings.json").write_bytes(orjson.dumps(
        {"scenario": "mixed", "promised_paths": ["replay", "already_paid", "signature_refusal",
                                                 "inbox_skip"], "min_acknowledged": 1}))
    return operations


def measure(run_dir: Path, tree: Path | None = None) -> dict:
    """Check the run in a fresh interpreter: wall time and peak RSS of the check alone."""
    # VmHWM (not ru_maxrss, which a forked child inherits from this big parent)
    code = (
        "import json, resource, time, sys\n"
        "from pathlib import Path\n"
        "from harness.check.checker import check_run\n"
        "def hwm():\n"
        "    for line in open('/proc/self/status'):\n"
        "        if line.startswith('VmHWM:'):\n"
        "            return int(line.split()[1])\n"
        "try:\n"
        "    from harness.run.rundir import RunDir\n"
        "    run = RunDir(Path(sys.argv[1]))\n"
        "except ImportError:  # an older tree (--compare): check_run took the path\n"
        "    run = Path(sys.argv[1])\n"
        "def cpu_s():\n"
        "    usage = resource.getrusage(resource.RUSAGE_SELF)\n"
        "    return usage.ru_utime + usage.ru_stime\n"
        "base = hwm()\n"
        "start, cpu = time.perf_counter(), cpu_s()\n"
        "result = check_run(run)\n"
        "seconds, cpu = time.perf_counter() - start, cpu_s() - cpu\n"
        "peak = hwm()\n"
        "print(json.dumps({'seconds': seconds, 'cpu': cpu, 'peak_mib': peak / 1024, 'base_mib': base / 1024,\n"
        "                  'valid': result.valid, 'verdict': result.verdict,\n"
        "                  'operations': result.counts['operations'],\n"
        "                  'violations': sum(i.violation_count for i in result.invariants)}))\n"
    )
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)  # before the installed package on sys.path
    # -P: `-c` would put the current directory first on sys.path, so from the
    # repository's root `--compare` would import this tree's harness, not DIR's.
    output = subprocess.run([sys.executable, "-P", "-c", code, str(run_dir)], check=True,
                            capture_output=True, text=True, env=env).stdout
    return json.loads(output.strip().splitlines()[-1])


def instructions(run_dir: Path, tree: Path | None = None) -> int:
    """Instructions `check_run` executes on the run, counted by valgrind (callgrind): the
    count of a fresh interpreter that checks the run minus one that only imports. Unlike
    CPU time it does not move with the machine's load, so a change of a few percent is
    seen on a shared VM; valgrind runs about 50 times slower, so use a small row."""
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from harness.check.checker import check_run\n"
        "from harness.run.rundir import RunDir\n"
        "if sys.argv[2] == 'check':\n"
        "    check_run(RunDir(Path(sys.argv[1])))\n"
    )
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    counts = []
    for mode in ("check", "imports"):
        output = subprocess.run(
            ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-P", "-c",
             code, str(run_dir), mode], check=True, capture_output=True, text=True, env=env).stderr
        collected = [line for line in output.splitlines() if "Collected :" in line]
        counts.append(int(collected[-1].split(":")[-1]))
    return counts[0] - counts[1]


def compare_parsers(run_dir: Path) -> None:
    """CPU seconds to decode every history line of a run, per decoder, alternating twice:
    the evidence for the reader's decoders (orjson into dicts, every field: evidence
    and the report; msgspec into `harness.history.Record`, an Invoke or a Completion
    of the fold's fields only, which skips the others: the checker's fold)."""
    import msgspec

    from harness.history import Record
    decoders = {"orjson.loads (dicts, every field)": orjson.loads,
                "msgspec (dicts, every field)": msgspec.json.Decoder().decode,
                "msgspec (harness.history.Record: the fold's fields)": msgspec.json.Decoder(Record).decode}
    files = sorted((run_dir / "histories").glob("*.jsonl"))
    best: dict[str, float] = {}
    for _ in range(2):
        for label, decode in decoders.items():
            started = resource.getrusage(resource.RUSAGE_SELF)
            for path in files:
                with open(path, "rb") as handle:
                    for line in handle:
                        decode(line)
            ended = resource.getrusage(resource.RUSAGE_SELF)
            cpu = ended.ru_utime + ended.ru_stime - started.ru_utime - started.ru_stime
            best[label] = min(cpu, best.get(label, cpu))
    print("| decoder | CPU s to decode every history line (best of 2) |\n|---|---:|")
    for label, cpu in best.items():
        print(f"| {label} | {cpu:.2f} |", flush=True)


ROW_FILE = "bench-row.json"  # in a kept run directory: the row it was generated for


def _generated(run_dir: Path, *, orders: int, rounds: int, duplicates: int, lost: int) -> int:
    """The run's operation count: generated into run_dir, or read back from a kept run
    of the same row (a kept run of another row is refused, not silently measured)."""
    row = {"orders": orders, "rounds": rounds, "duplicates": duplicates, "lost": lost}
    marker = run_dir / ROW_FILE
    if run_dir.exists():
        kept = json.loads(marker.read_text()) if marker.is_file() else None
        if kept is None or {name: kept.get(name) for name in row} != row:
            sys.exit(f"{run_dir} holds no run of row {row} (its {ROW_FILE}: {kept})")
        return int(kept["operations"])
    operations = generate(run_dir, orders=orders, rounds=rounds, duplicates=duplicates, lost=lost)
    marker.write_text(json.dumps({**row, "operations": operations}))
    return operations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes only")
    parser.add_argument("--repeat", type=int, default=3,
                        help="checks per row; the best wall and CPU time are shown, because "
                             "other work on a shared machine only ever adds time")
    parser.add_argument("--row", metavar="ORDERS,ROUNDS,SECOND,LOST",
                        help="one row only, e.g. 100000,1,0,0 (for iterating on the checker)")
    parser.add_argument("--compare", type=Path, metavar="DIR",
                        help="also check each row with the harness package in DIR, alternating")
    parser.add_argument("--run-dir", type=Path, metavar="DIR",
                        help="one row only: generate its run in DIR when DIR does not exist, "
                             "else check the run already there (generating 10^7 takes minutes)")
    parser.add_argument("--instructions", action="store_true",
                        help="also count the instructions of each check with valgrind (slow: a small row)")
    parser.add_argument("--parsers", action="store_true",
                        help="with --run-dir: also time each JSON decoder over the run's history lines")
    args = parser.parse_args()
    if args.run_dir is not None and not args.row:
        parser.error("--run-dir needs --row (one run directory holds one row)")
    # (orders, duplicate rounds, second payments, lost payments)
    if args.row:
        rows = [tuple(int(part) for part in args.row.split(","))]
    elif args.quick:
        rows = [(2_000, 1, 0, 0), (4_000, 1, 0, 0), (2_000, 4, 0, 0), (4_000, 1, 40, 0), (4_000, 1, 0, 40)]
    else:
        rows = [(25_000, 1, 0, 0), (50_000, 1, 0, 0), (100_000, 1, 0, 0), (25_000, 7, 0, 0),
                (100_000, 1, 1_000, 0), (100_000, 1, 0, 1_000)]
    print("| orders | operations | injected | check wall s | check CPU s | peak RSS MiB "
          "| RSS above start MiB | verdict |")
    print("|---:|---:|---|---:|---:|---:|---:|:---:|")
    for orders, rounds, duplicates, lost in rows:
        injected = (f"{duplicates:,} second payments" if duplicates else
                    f"{lost:,} lost payments" if lost else "none")
        with tempfile.TemporaryDirectory(prefix="bench-checker-") as temp:
            run_dir = args.run_dir if args.run_dir is not None else Path(temp) / "run"
            started = time.perf_counter()
            operations = _generated(run_dir, orders=orders, rounds=rounds, duplicates=duplicates,
                                    lost=lost)
            generated = time.perf_counter() - started
            runs, others = [], []
            for _ in range(max(1, args.repeat)):
                runs.append(measure(run_dir))
                if args.compare is not None:
                    others.append(measure(run_dir, args.compare))
            # (inside the with: a generated run is gone after it)
            counted = {label: instructions(run_dir, tree) for label, tree in
                       (("this tree", None), (f"compared: {args.compare}", args.compare))
                       if args.instructions and (tree is not None or label == "this tree")}
        if others:
            best = min(others, key=lambda figure: figure["seconds"])
            print(f"| {orders:,} | {best['operations']:,} | {injected} (compared: {args.compare}) "
                  f"| {best['seconds']:.2f} | {min(f['cpu'] for f in others):.2f} "
                  f"| {max(f['peak_mib'] for f in others):.0f} | {best['peak_mib'] - best['base_mib']:.0f} "
                  f"| {best['verdict']} |", flush=True)
        figures = min(runs, key=lambda figure: figure["seconds"])
        figures["cpu"] = min(figure["cpu"] for figure in runs)
        figures["peak_mib"] = max(figure["peak_mib"] for figure in runs)
        assert figures["operations"] == operations, figures
        print(f"| {orders:,} | {operations:,} | {injected} | {figures['seconds']:.2f} | {figures['cpu']:.2f} "
              f"| {figures['peak_mib']:.0f} | {figures['peak_mib'] - figures['base_mib']:.0f} "
              f"| {figures['verdict']} |", flush=True)
        for label, count in counted.items():
            print(f"<!-- instructions of the check ({label}): {count:,}, "
                  f"{count / operations:,.0f} per operation -->", flush=True)
        if args.parsers:
            compare_parsers(run_dir)
        walls = ", ".join(f"{figure['seconds']:.2f}" for figure in runs)
        print(f"<!-- generated in {generated:.1f} s; violations {figures['violations']}; "
              f"wall of each check {walls} s -->", flush=True)
    print(f"<!-- python {sys.version.split()[0]}, load average at the end "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} -->")


if __name__ == "__main__":
    main()
