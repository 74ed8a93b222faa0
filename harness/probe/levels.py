"""What a failed conformance row means for the probe's verdict: FAIL for what money
or a client's retry depends on and for the draft's MUSTs, advice for its manners,
and the manners as failures too when the run is strict.

`apply_levels(check, rows, strict=...)` takes the checker's result and the run's
conformance table (harness.probe.conformance) and returns the check the run reports:

- rows the invariants judge (`enforce-once` by `one_resource_per_key`, the MUST
  `refuse-uncorrected` by `payload_mismatch_refused` and `expected_codes`, ...) fail
  the run through their invariant, so they add nothing here;
- the code rows (`missing-400`, `mismatch-422`, `inflight-409`) are judged by the
  checker against the run's codes (the profile's, or those `expect:` writes): its
  advice, `expected_codes`, `in_flight_refused_or_waited`;
- every other failed row below MUST (today `error-doc`, a SHOULD) is advice;
- with `strict`, every SHOULD advice (the checker's and the rows') is instead a
  violation of the `should_rows` invariant, so the one verdict rule
  (harness.probe.checker.verdict_of) fails the run; MAY and practice stay advice.

`require_should_rows(config)` refuses (exit 2) a strict run that would judge no SHOULD
row at all: the draft's rows judge `endpoints:`; messages, webhooks and a provider's
ledger have none, so `strict` would promise what the run cannot check.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from harness.probe.checker import Advice, InvariantResult, ProbeCheck, verdict_of
from harness.probe.config import ProbeConfig, ProbeConfigError
from harness.probe.conformance import ConformanceRow

STRICT_INVARIANT = "should_rows"
STRICT_DESCRIPTION = "every SHOULD of the draft the run judged holds (strict: the draft to the letter)"
# Rows whose failure an invariant of the checker already is (or, for the codes, that the
# checker judges against the run's own codes): no second entry for them.
JUDGED_BY_THE_CHECKER = frozenset({
    "enforce-once", "replay-same", "fingerprint", "refuse-uncorrected", "identity-scoped", "no-5xx-replay",
    "read-back", "missing-400", "mismatch-422", "inflight-409",
})
JUDGED = ("pass", "fail")  # a row's statuses that judged something


def row_advice(rows: Sequence[ConformanceRow]) -> list[Advice]:
    """The failed rows below MUST that no invariant or code check of the checker covers."""
    return [Advice(row.id, row.level, row.evidence) for row in rows
            if row.status == "fail" and row.level != "MUST" and row.id not in JUDGED_BY_THE_CHECKER]


def apply_levels(check: ProbeCheck, rows: Sequence[ConformanceRow], *, strict: bool) -> ProbeCheck:
    """The check with the rows' advice added and, when strict, its SHOULD advice turned
    into `should_rows` violations; its verdict by checker.verdict_of again."""
    advice = [*check.advice, *row_advice(rows)]
    if not strict:
        return replace(check, advice=advice)
    should = InvariantResult(STRICT_INVARIANT, STRICT_DESCRIPTION,
                             checked=sum(1 for row in rows if row.level == "SHOULD" and row.status in JUDGED))
    for item in advice:
        if item.level == "SHOULD":
            should.violate(f"{item.rule} ({item.level}): {item.message}", rule=item.rule, level=item.level)
    invariants = [*check.invariants, should]
    return replace(check, invariants=invariants, advice=[item for item in advice if item.level != "SHOULD"],
                   verdict=verdict_of(invariants, check.inconclusive_reasons))


def require_should_rows(config: ProbeConfig) -> None:
    """ProbeConfigError (exit 2) for a strict config whose run judges no SHOULD row."""
    if config.strict and not config.endpoints:
        raise ProbeConfigError(f"{config.source}: strict (--strict or `strict: true`): nothing in this config is "
                               "judged at SHOULD level (the "
                               "draft's rows judge `endpoints:`; messages, webhooks and a provider's ledger have "
                               "no SHOULD rows): drop strict or add an endpoint")
