"""report.html and result.json from hand-built run directories."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import orjson
from html_probe import SVG, Probe, svgs
from report_sample import FAULTS, START, base_result, typed

from harness.history import Client, HistoryWriter
from harness.report.run_report import ReportPaths, render_report, summary_line, write_reports
from harness.report.series import RunSeries
from harness.run.rundir import RunDir, RunSettings

PLOTS = ("throughput", "latency", "errors", "outcomes", "layers")
TIME_PLOTS = ("throughput", "latency", "errors")


def test_failing_run_writes_the_three_files(failing_run: tuple[Path, dict[str, Any]]) -> None:
    run_dir, result = failing_run
    paths = write_reports(RunDir(run_dir), typed(result))
    assert paths == ReportPaths(run_dir / "result.json", run_dir / "junit.xml",
                                run_dir / "report.html")
    for path in (paths.result_json, paths.junit_xml, paths.report_html):
        assert path.is_file() and path.stat().st_size > 0
    assert not list(run_dir.glob("*.partial"))


def test_result_json_round_trips(failing_run: tuple[Path, dict[str, Any]]) -> None:
    run_dir, result = failing_run
    original = copy.deepcopy(result)
    paths = write_reports(RunDir(run_dir), typed(result))
    assert json.loads(paths.result_json.read_text()) == original
    assert result == original  # the writer must not modify its input


def test_verdict_comes_first_and_says_fail(failing_run: tuple[Path, dict[str, Any]]) -> None:
    run_dir, result = failing_run
    document = write_reports(RunDir(run_dir), typed(result)).report_html.read_text()
    probe = Probe(document)
    [verdict] = probe.find(id="verdict")
    assert verdict["data-valid"] == "false"
    assert document.index("id='verdict'") < document.index("<svg")
    text = probe.all_text
    assert "FAIL" in text and f"2 of {len(result['invariants'])} invariants violated" in text
    assert "domain" in text  # the mutant (unsafe_disable) is named in the verdict
    failed_rows = probe.find("tr", **{"class": "failed"})
    assert {row["data-invariant"] for row in failed_rows} == {
        "one_payment_per_order", "message_effects_once"}


def test_passing_run_verdict(passing_run: tuple[Path, dict[str, Any]]) -> None:
    run_dir, result = passing_run
    probe = Probe(write_reports(RunDir(run_dir), typed(result)).report_html.read_text())
    [verdict] = probe.find(id="verdict")
    assert verdict["data-valid"] == "true"
    assert f"all {len(base_result('mixed', 0)['invariants'])} invariants held" in probe.all_text
    assert "No violations" in probe.all_text
    assert not probe.find("tr", **{"class": "failed"})


def test_every_plot_is_embedded_with_a_title(failing_run: tuple[Path, dict[str, Any]]) -> None:
    run_dir, result = failing_run
    plots = svgs(write_reports(RunDir(run_dir), typed(result)).report_html.read_text())
    assert set(plots) == set(PLOTS)
    for name, svg in plots.items():
        title = svg.find(f"{SVG}title")
        assert title is not None and title.text, name
    # Throughput draws one line per operation type, with real data in it.
    lines = {p.get("data-series") for p in plots["throughput"].iter(f"{SVG}polyline")}
    assert lines == {"create_order", "pay", "webhook", "publish"}
    bars = {(r.get("data-category"), r.get("data-segment"))
            for r in plots["outcomes"].iter(f"{SVG}rect") if r.get("class") == "bar"}
    assert ("pay", "info") in bars and ("create_order", "ok") in bars
    layer_labels = {r.get("data-category") for r in plots["layers"].iter(f"{SVG}rect")}
    assert "inbox · duplicates skipped" in layer_labels


def test_fault_windows_are_shaded_on_every_time_plot(
    failing_run: tuple[Path, dict[str, Any]],
) -> None:
    run_dir, result = failing_run
    plots = svgs(write_reports(RunDir(run_dir), typed(result)).report_html.read_text())
    for name in TIME_PLOTS:
        windows = [r for r in plots[name].iter(f"{SVG}rect") if r.get("class") == "fault-window"]
        assert len(windows) == len(FAULTS), name
        labels = {r.get("data-fault") for r in windows}
        assert labels == {"latency_downstream @ app", "reset_peer @ app", "redis_down @ redis"}
        by_label = {r.get("data-fault"): r for r in windows}
        # 12–22 s lasts longer than 38–43.5 s, so its band must be wider.
        assert float(by_label["latency_downstream @ app"].get("width")) > float(
            by_label["redis_down @ redis"].get("width"))
        assert float(by_label["latency_downstream @ app"].get("x")) < float(
            by_label["redis_down @ redis"].get("x"))


def test_failing_evidence_is_present(failing_run: tuple[Path, dict[str, Any]]) -> None:
    run_dir, result = failing_run
    probe = Probe(write_reports(RunDir(run_dir), typed(result)).report_html.read_text())
    text = probe.all_text
    for needle in ("order ord_7f3a holds 2 payments", "pr_api_1", "pr_hook_2", "evt_88",
                   "key-41", "w0-u4-p1:17", "ReadTimeout", "message m_551 produced 2 effects"):
        assert needle in text, needle
    # Times are relative to the run start: payment applied 19.2 s in.
    assert "+19.200" in text
    assert '["pr_api_1","pr_hook_2"]' in text  # the violation's details
    violations = probe.find("details", **{"class": "violation"})
    assert len(violations) == 3


def test_hostile_strings_are_escaped(tmp_path: Path) -> None:
    hostile = "<script>alert('x')</script>"
    run_dir = tmp_path / "hostile"
    with HistoryWriter(run_dir / "histories" / "w0-1.jsonl") as writer:
        client = Client(writer, worker="w0", user=0)
        client.invoke("pay", order_id=hostile, provider_ref="<b>ref</b>").info(error=hostile)
    fault = dict(FAULTS[0], name="<img src=x onerror=alert(1)>", target="a'b\"c")
    (run_dir / "faults.jsonl").write_bytes(orjson.dumps(fault) + b"\n")
    result = base_result("mixed", 1)
    result["valid"] = False
    result["scenario"] = hostile
    result["run_id"] = hostile
    result["invariants"][0].update(passed=False, violation_count=1, violations=[{
        "invariant": "one_payment_per_order", "order_id": hostile,
        "message": f"order {hostile} holds 2 payments",
        "evidence": {"payments": [{"order_id": hostile, "provider_ref": "<b>ref</b>"}],
                     "operations": [{"op_id": hostile, "error": hostile}],
                     "faults": [fault], hostile: hostile}}])
    result["duplicates"] = {hostile: 1}
    result["layers"] = {hostile: {hostile: 3}}
    document = write_reports(RunDir(run_dir), typed(result)).report_html.read_text()
    assert "<script" not in document
    assert "<img" not in document
    assert "<b>ref" not in document
    assert "&lt;script&gt;" in document
    assert hostile in Probe(document).all_text  # shown, as text
    svgs(document)  # still well-formed XML


def test_page_is_self_contained(failing_run: tuple[Path, dict[str, Any]]) -> None:
    run_dir, result = failing_run
    document = write_reports(RunDir(run_dir), typed(result)).report_html.read_text()
    probe = Probe(document)
    assert not probe.find("script") and not probe.find("link") and not probe.find("img")
    remaining = document.replace("http://www.w3.org/2000/svg", "")
    assert "http://" not in remaining and "https://" not in remaining


def test_empty_history_still_renders(tmp_path: Path) -> None:
    run_dir = tmp_path / "empty"
    run_dir.mkdir()
    result = base_result("timeout_replay", 0)
    result.update(outcomes={}, layers={}, duplicates={}, jepsen={})
    paths = write_reports(RunDir(run_dir), typed(result))
    document = paths.report_html.read_text()
    probe = Probe(document)
    assert probe.find(id="verdict")[0]["data-valid"] == "true"
    assert set(svgs(document)) == set(PLOTS)
    assert "no operations recorded" in probe.all_text
    assert json.loads(paths.result_json.read_text()) == result


def test_faults_without_operations_set_the_time_axis(tmp_path: Path) -> None:
    run_dir = tmp_path / "faults-only"
    (run_dir / "histories").mkdir(parents=True)
    (run_dir / "faults.jsonl").write_bytes(
        b"".join(orjson.dumps(f) + b"\n" for f in FAULTS) + b'{"torn": ')
    document = write_reports(RunDir(run_dir), typed(base_result("mixed", 0))).report_html.read_text()
    windows = [r for r in svgs(document)["errors"].iter(f"{SVG}rect")
               if r.get("class") == "fault-window"]
    assert len(windows) == len(FAULTS)  # the torn last line is skipped, not fatal


def test_summary_line_pass_and_fail(tmp_path: Path) -> None:
    report = tmp_path / "report.html"
    passing = base_result("mixed", 1234)
    assert summary_line(typed(passing), report) == (
        f"PASS: all {len(passing['invariants'])} invariants held (1234 operations, {len(FAULTS)} faults) — report: {report}")
    failing = copy.deepcopy(passing)
    failing["valid"] = False
    failing["invariants"][0].update(passed=False, violation_count=2)
    failing["invariants"][5].update(passed=False, violation_count=1)
    assert summary_line(typed(failing), report) == (
        "FAIL: one_payment_per_order (2 violations), inventory_conservation (1 violation)"
        f" — report: {report}")


def test_run_start_is_the_time_origin(failing_run: tuple[Path, dict[str, Any]]) -> None:
    run_dir, result = failing_run
    document = write_reports(RunDir(run_dir), typed(result)).report_html.read_text()
    text = Probe(document).all_text
    assert "+12.000" in text  # the first fault starts 12 s after START
    assert str(int(START)) not in text  # no raw unix times in the page


def test_paths_and_dead_letters_are_shown_and_a_missed_promise_is_flagged(tmp_path: Path) -> None:
    result = base_result("mixed", 10)
    result["paths"]["recovery_point"] = 0
    result.update(verdict="inconclusive", valid=False,
                  inconclusive_reasons=["path recovery_point was promised but exercised 0 times"])
    html = render_report(typed(result), RunSeries(), [])
    probe = Probe(html)
    [verdict] = probe.find(id="verdict")
    assert verdict["data-verdict"] == "inconclusive" and verdict["data-valid"] == "false"
    assert "INCONCLUSIVE" in probe.all_text and "recovery_point was promised" in probe.all_text
    [row] = probe.find("tr", **{"data-path": "recovery_point"})
    assert "NOT EXERCISED" in html[html.index("data-path='recovery_point'"):][:400]
    assert probe.find("tr", **{"data-path": "replay"})
    assert "no message_id" in probe.all_text and "pr_9" in probe.all_text
    assert summary_line(typed(result), tmp_path / "r.html").startswith("INCONCLUSIVE: no invariant was violated")


def test_an_interrupted_run_says_so_in_the_summary_and_the_verdict(tmp_path: Path) -> None:
    result = base_result("mixed", 10)
    result["interrupted"] = {"interrupted": True, "signal": "SIGTERM", "phase": "load"}
    line = summary_line(typed(result), tmp_path / "r.html")
    assert line.startswith("INTERRUPTED (SIGTERM during load): the recorded part held every invariant")
    probe = Probe(render_report(typed(result), RunSeries(), []))
    assert "INTERRUPTED by SIGTERM during load" in probe.all_text


def test_the_verdict_shows_users_and_seed_from_the_runs_settings(tmp_path: Path) -> None:
    # settings.json as the runner writes it: users and seed at the top level, the spec beside them
    run_dir = RunDir(tmp_path / "run")
    run_dir.path.mkdir()
    run_dir.write_settings(RunSettings(run_id="r1", scenario="mixed", users=37, seed=11,
                                       spec={"scenario": "mixed", "users": 37, "seed": 11}))
    document = write_reports(run_dir, typed(base_result("mixed", 0))).report_html.read_text()
    assert "<dt>users</dt><dd>37</dd>" in document and "<dt>seed</dt><dd>11</dd>" in document


def test_older_settings_with_users_and_seed_only_in_the_spec_still_show_them(tmp_path: Path) -> None:
    (tmp_path / "settings.json").write_text(json.dumps(
        {"run_id": "r0", "scenario": "mixed", "spec": {"users": 5, "seed": 3}}))
    settings = RunDir(tmp_path).read_settings()
    assert settings is not None and (settings.users, settings.seed) == (5, 3)
