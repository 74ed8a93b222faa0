"""The message invariants: each published fact took effect exactly once.

From the producer's history (`op: publish`) and the drain's outcomes
(harness.probe.messages.play.MessageOutcome):

- `fact_applied_once`: no fact has more than one effect, whatever the copies: the
  same id twice, twice at once, the same fact under a new id, the broker's
  redeliveries. (A consumer that dedupes by message id only fails it on
  `same_fact_new_id`: the domain's unique key is what stops that copy.)
- `published_fact_applied`: every fact with a confirmed publish has an effect once
  the consumer drained (the broker holds nothing unacknowledged). A fact missing
  then is a lost message, a violation, not a silence. A fact missing while the
  broker still holds messages is "not drained", reported as inconclusive.
- `no_valid_message_dead_lettered`: every message the probe publishes is valid, so
  a dead-lettered one is the consumer giving up on it: listed always, a violation
  when its fact has no effect (parked, never applied).

Only this run's facts are judged: a fact that already had effects before its first
publish (harness.probe.messages.play counts them) is set aside and makes the run
inconclusive, naming it; a dead letter whose fact this run never published (an
earlier run's) is left out. The broker's counts are the run's own (their difference
over the run).

A run is inconclusive (never PASS) when the broker made no redelivery by its own
count (none was provoked, so the consumer's handling of one was not tested) or
cannot tell, when nothing was confirmed, when the consumer took nothing (no fact has
an effect and the broker still holds them: a consumer down throughout), or when it
did not drain within the drain timeout.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.probe.checker import InvariantResult, ProbeCheck, verdict_of
from harness.probe.messages.play import MessageOutcome

MESSAGE_INVARIANTS: dict[str, str] = {
    "fact_applied_once": "no message fact has more than one effect, whatever copies and redeliveries came",
    "published_fact_applied": "every fact with a confirmed publish has an effect once the consumer drained",
    "no_valid_message_dead_lettered": "no valid message was dead-lettered without taking effect",
}


@dataclass
class MessageCheck:
    invariants: list[InvariantResult]
    counts: dict[str, Any]
    reasons: list[str]


def _key(fact: Any) -> str:
    return json.dumps(fact, sort_keys=True)


def check_messages(operations: Iterable[Mapping[str, Any]], outcomes: Sequence[MessageOutcome]) -> MessageCheck:
    results = {name: InvariantResult(name, description) for name, description in MESSAGE_INVARIANTS.items()}
    once, applied, parked = (results["fact_applied_once"], results["published_fact_applied"],
                             results["no_valid_message_dead_lettered"])
    publishes: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    kinds: dict[str, Counter[str]] = defaultdict(Counter)
    for op in operations:
        if op.get("op") != "publish":
            continue
        name = str(op.get("message"))
        publishes[(name, _key(op.get("fact")))].append(op)
        kinds[name][f"{op.get('kind')}:{op['type']}"] += 1
    reasons: list[str] = []
    per_entry: dict[str, Any] = {}
    for outcome in outcomes:
        name = outcome.name
        confirmed_facts = {fact for (entry, fact), ops in publishes.items()
                           if entry == name and any(op["type"] == "ok" for op in ops)}
        missing = []
        before = {_key(fact): count for fact, count in outcome.preexisting}
        if before:
            fact, count = outcome.preexisting[0]
            reasons.append(f"{name}: {len(before)} facts already had effects before this run published them "
                           f"(first: {fact!r} with {count}), so they cannot be judged: an earlier run's rows, or "
                           "an effects query that counts more than one fact's rows")
        judged = [(fact, count) for fact, count in outcome.effects if _key(fact) not in before]
        confirmed_facts -= set(before)
        for fact, count in judged:
            key = _key(fact)
            ops = publishes.get((name, key), [])
            shown = {"entry": name, "fact": fact, "effects": count,
                     "publishes": [{"message_id": op.get("message_id"), "kind": op.get("kind"), "type": op["type"],
                                    **({"duplicate": True} if op.get("duplicate") else {})} for op in ops]}
            once.checked += 1
            if count > 1:
                kinds_seen = sorted({str(op.get("kind")) for op in ops})
                once.violate(f"{name}: fact {fact!r} took effect {count} times (its copies: {', '.join(kinds_seen)})",
                             **shown)
            if key in confirmed_facts:
                applied.checked += 1
                if count == 0:
                    missing.append(shown)
        none_applied = bool(confirmed_facts) and not any(count for _, count in judged)
        if none_applied:
            # A consumer down throughout proves nothing either way: inconclusive, never PASS.
            reasons.append(f"{name}: no fact took effect at all: the consumer took no message "
                           f"({outcome.backlog if outcome.backlog is not None else 'unknown'} left on the broker)")
        elif missing and outcome.drained is False and outcome.backlog:
            reasons.append(f"{name}: the consumer did not drain within the drain timeout "
                           f"({outcome.backlog} messages still on the broker, {len(missing)} facts without effect)")
        elif missing:
            for shown in missing:
                applied.violate(f"{name}: fact {shown['fact']!r} was confirmed by the broker and never took effect "
                                "(a lost message)", **shown)
        effects = dict((_key(fact), count) for fact, count in judged)
        for letter in outcome.dead_letters:
            if _key(letter.get("fact")) not in effects:
                continue  # not a fact this run published and can judge: an earlier run's dead letter
            parked.checked += 1
            if effects.get(_key(letter.get("fact")), 0) == 0:
                parked.violate(f"{name}: valid message {letter.get('message_id')} was dead-lettered and its fact "
                               f"{letter.get('fact')!r} never took effect", entry=name, **letter)
        if not confirmed_facts and not before:
            reasons.append(f"{name}: the broker confirmed no publish")
        if outcome.redeliveries is None:
            reasons.append(f"{name}: the broker's redelivery count could not be read "
                           + ("(give `management:` for RabbitMQ)" if outcome.broker == "rabbitmq" else ""))
        elif outcome.redeliveries == 0:
            reasons.append(f"{name}: the broker redelivered nothing (its own count): no redelivery was provoked, "
                           "so the consumer's handling of one is untested")
        per_entry[name] = {"broker": outcome.broker, "facts": len(outcome.effects), "confirmed_facts":
                           len(confirmed_facts), "redeliveries": outcome.redeliveries, "drained": outcome.drained,
                           "drain_seconds": outcome.drain_seconds, "backlog": outcome.backlog,
                           "dead_letters": outcome.dead_letter_count, "stats_current": outcome.stats_current,
                           "preexisting_facts": len(before), "counts_before": outcome.counts_before,
                           "publishes": dict(kinds[name])}
    counts = {"messages": per_entry,
              "publishes": sum(len(ops) for ops in publishes.values()),
              "confirmed": sum(1 for ops in publishes.values() for op in ops if op["type"] == "ok"),
              "redeliveries": sum(o.redeliveries or 0 for o in outcomes)}
    return MessageCheck(invariants=list(results.values()), counts=counts, reasons=reasons)


def combine(check: ProbeCheck, messages: MessageCheck, *, endpoints: bool = True) -> ProbeCheck:
    """The endpoints' check with the messages' invariants, counts and reasons, and the
    verdict again; without endpoints, only the messages' (no request was made)."""
    invariants = [*(check.invariants if endpoints else []), *messages.invariants]
    reasons = [*(check.inconclusive_reasons if endpoints else []), *messages.reasons]
    return ProbeCheck(invariants=invariants, counts={**check.counts, **messages.counts},
                      verdict=verdict_of(invariants, reasons), inconclusive_reasons=reasons,
                      advice=list(check.advice) if endpoints else [])
