"""`harness fault ...`: toggle network and process faults by hand.

Network faults go to Toxiproxy (the running stack's, or any given by
`--toxiproxy-url`); process faults go to the running stack (its supervisor, or
docker under compose). Every input is checked before anything is sent, so a typo is
a one-line error (exit 2) and never a half-applied fault. The process actions are
`harness.nemesis.faults.ProcessAction`, one subcommand each; a failed heal (`clear`,
`up`, `remove`, `start`, `resume`) is an error, never a silent success.

`crash-point NAME --action A [--probability P] [--count N] [--delay MS]` arms one of
the app's crash points (harness.nemesis.crash_points) on the running stack's internal
listener and prints what the app reads back; `clear` disarms every crash point as
well, and `list` shows the armed ones with their hits.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from harness.catalog import CRASH_POINTS
from harness.cli.argtypes import add_root_option, non_negative_int
from harness.errors import HarnessError
from harness.nemesis.crash_points import CRASH_POINT_ACTIONS, CrashPointClient, CrashPointInfo, check_arming
from harness.nemesis.faults import ProcessAction
from harness.nemesis.stack_proxies import StackNemesis
from harness.nemesis.toxiproxy_client import STREAMS, Nemesis, NemesisInvalid, NemesisUnreachable, validate_toxic
from harness.stack.local import Stack, open_stack
from harness.toxiproxy.toxics import TOXIC_ATTRIBUTES

# The stack's own proxies by their plain names, or any Toxiproxy by its real ones.
Network = Nemesis | StackNemesis


class FaultInputError(HarnessError):
    """A fault command named an unknown proxy, toxic, service or a bad value."""


# Toxiproxy's own units, which its API takes as whole numbers: the help names them,
# since `--delay` means milliseconds to slow_close and microseconds to slicer.
_UNITS: dict[tuple[str, str], str] = {
    ("latency", "latency"): "ms", ("latency", "jitter"): "ms", ("bandwidth", "rate"): "KB/s",
    ("slow_close", "delay"): "ms", ("timeout", "timeout"): "ms", ("reset_peer", "timeout"): "ms",
    ("slicer", "average_size"): "bytes", ("slicer", "size_variation"): "bytes", ("slicer", "delay"): "µs",
    ("limit_data", "bytes"): "bytes",
}


def _attribute_help(attribute: str) -> str:
    uses = [f"{toxic}: {_UNITS[(toxic, attribute)]}" for toxic, names in TOXIC_ATTRIBUTES.items()
            if attribute in names]
    return "; ".join(uses)


def _attribute_names() -> list[str]:
    names: list[str] = []
    for attributes in TOXIC_ATTRIBUTES.values():
        names.extend(name for name in attributes if name not in names)
    return names


def _toxicity(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text}")
    return value


def _probability(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value


def _target_options(parser: argparse.ArgumentParser) -> None:
    add_root_option(parser)
    parser.add_argument("--toxiproxy-url", help="any Toxiproxy API, no stack needed")


def add_fault(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("fault", help="add, remove or list faults by hand")
    commands = parser.add_subparsers(dest="fault_command", required=True, metavar="ACTION")

    add = commands.add_parser("add", help="add a toxic to a proxy")
    add.add_argument("type", choices=sorted(TOXIC_ATTRIBUTES), metavar="TYPE",
                     help=f"toxic type: {', '.join(sorted(TOXIC_ATTRIBUTES))}")
    add.add_argument("--proxy", required=True, help="proxy name (app or redis on the stack)")
    add.add_argument("--stream", default="downstream", type=str.lower, choices=STREAMS)
    add.add_argument("--toxicity", type=_toxicity, default=1.0, help="0..1 (default 1)")
    add.add_argument("--name", help="toxic name (default TYPE_STREAM)")
    for attribute in _attribute_names():
        add.add_argument(f"--{attribute.replace('_', '-')}", dest=f"attr_{attribute}",
                         type=non_negative_int, metavar="N",
                         help=_attribute_help(attribute))
    _target_options(add)
    add.set_defaults(handler=handle_add)

    remove = commands.add_parser("remove", help="remove a toxic by name")
    remove.add_argument("name")
    remove.add_argument("--proxy", help="the proxy holding it (default: search every proxy)")
    _target_options(remove)
    remove.set_defaults(handler=handle_remove)

    listing = commands.add_parser("list", help="active toxics, disabled proxies, stopped services, "
                                               "armed crash points")
    listing.add_argument("--json", action="store_true")
    _target_options(listing)
    listing.set_defaults(handler=handle_list)

    crash = commands.add_parser("crash-point", help="arm a crash point of the app (read back)",
                                description="Arm one of the app's crash points through its internal "
                                            "listener; the app's read-back is printed. "
                                            f"Crash points: {', '.join(CRASH_POINTS)}.")
    crash.add_argument("name", metavar="NAME", help="a crash point, e.g. consumer.after_effect")
    crash.add_argument("--action", required=True, choices=CRASH_POINT_ACTIONS,
                       help=f"what happens there: {', '.join(CRASH_POINT_ACTIONS)}")
    crash.add_argument("--probability", type=_probability, default=1.0, metavar="P",
                       help="chance it fires each time the point is passed, (0, 1] (default 1)")
    crash.add_argument("--count", type=non_negative_int, metavar="N", help="fire at most N times (N >= 1)")
    crash.add_argument("--delay", type=non_negative_int, metavar="MS", help="milliseconds of a delay (needed by it)")
    add_root_option(crash)
    crash.set_defaults(handler=handle_crash_point)

    clear = commands.add_parser("clear", help="remove every toxic, enable every proxy, disarm every crash point")
    _target_options(clear)
    clear.set_defaults(handler=handle_clear)

    for action, text in (("down", "disable a proxy (refuse connections)"), ("up", "enable a proxy")):
        sub = commands.add_parser(action, help=text)
        sub.add_argument("proxy")
        _target_options(sub)
        sub.set_defaults(handler=handle_proxy_toggle, enabled=(action == "up"))

    for action in ProcessAction:
        sub = commands.add_parser(action.value, help=f"{action} a service of the running stack")
        sub.add_argument("service")
        add_root_option(sub)
        sub.set_defaults(handler=handle_process, action=action)


# --- where faults go -------------------------------------------------------------------

def _stack(root: Path) -> Stack:
    stack = open_stack(root)
    if stack is None:
        raise HarnessError(f"no stack is running in {root}; start one with `harness up` "
                           "or pass --toxiproxy-url")
    return stack


def _nemesis(args: argparse.Namespace) -> tuple[Network, Stack | None]:
    url = args.toxiproxy_url or None
    if url:
        return Nemesis(url), None
    stack = open_stack(args.root)
    if stack is None:
        env_url = os.environ.get("TOXIPROXY_URL")
        if env_url:
            return Nemesis(env_url), None
        raise HarnessError(f"no stack is running in {args.root}; start one with `harness up` "
                           "or pass --toxiproxy-url")
    return stack.nemesis(), stack  # the stack's proxies by their plain names (prefix or not)


def _check_proxy(nemesis: Network, proxy: str) -> None:
    known = sorted(nemesis.proxies())
    if proxy not in known:
        raise FaultInputError(f"unknown proxy {proxy!r} (proxies: {', '.join(known) or 'none'})")


# --- handlers ---------------------------------------------------------------------------

def handle_add(args: argparse.Namespace) -> int:
    allowed = TOXIC_ATTRIBUTES[args.type]
    attributes: dict[str, int] = {}
    for attribute in _attribute_names():
        value = getattr(args, f"attr_{attribute}")
        if value is None:
            continue
        if attribute not in allowed:
            names = ", ".join(f"--{a.replace('_', '-')}" for a in allowed) or "none"
            raise FaultInputError(f"{args.type} has no attribute --{attribute.replace('_', '-')} "
                                  f"(its attributes: {names})")
        attributes[attribute] = value
    validate_toxic(args.type, args.stream, attributes, args.toxicity)
    nemesis, _ = _nemesis(args)
    _check_proxy(nemesis, args.proxy)
    toxic = nemesis.add_toxic(args.proxy, args.type, stream=args.stream, attributes=attributes,
                              toxicity=args.toxicity, name=args.name)
    shown = " ".join(f"{key}={value}" for key, value in toxic.attributes.items())
    print(f"added {toxic.name} on {args.proxy}: {toxic.type} {toxic.stream} {shown} "
          f"toxicity={toxic.toxicity:g}".replace("  ", " "))
    return 0


def handle_remove(args: argparse.Namespace) -> int:
    nemesis, _ = _nemesis(args)
    if args.proxy:
        _check_proxy(nemesis, args.proxy)
        holders = [t.proxy for t in nemesis.list_toxics() if t.proxy == args.proxy and t.name == args.name]
    else:
        holders = [t.proxy for t in nemesis.list_toxics() if t.name == args.name]
    if not holders:
        where = f"on proxy {args.proxy}" if args.proxy else "on any proxy"
        raise FaultInputError(f"no toxic named {args.name!r} {where}")
    if len(holders) > 1:
        raise FaultInputError(f"toxic {args.name!r} is on proxies {', '.join(holders)}; pick one with --proxy")
    nemesis.remove_toxic(holders[0], args.name)
    print(f"removed {args.name} from {holders[0]}")
    return 0


def list_document(nemesis: Network, stack: Stack | None) -> dict[str, Any]:
    """What `fault list --json` prints: proxies, toxics, and services not running."""
    proxies = nemesis.proxies()
    toxics = nemesis.list_toxics()
    document: dict[str, Any] = {
        "proxies": [{"name": p.name, "listen": p.listen, "upstream": p.upstream, "enabled": p.enabled}
                    for p in sorted(proxies.values(), key=lambda p: p.name)],
        "toxics": [{"proxy": t.proxy, "name": t.name, "type": t.type, "stream": t.stream,
                    "toxicity": t.toxicity, "attributes": dict(t.attributes)} for t in toxics],
        "processes": [],
    }
    if stack is not None:
        document["processes"] = [
            {"service": row["name"], "status": row["status"], "healthy": row["healthy"]}
            for row in stack.services() if row["status"] not in ("running", "external")]
    crash_points = _crash_points(nemesis)
    document["crash_points"] = []
    if crash_points is not None:
        try:
            document["crash_points"] = [_crash_point_row(point) for point in crash_points.armed()]
        except NemesisUnreachable as error:
            # The app may be down on purpose (a kill); the rest of the list still holds.
            document["crash_points_error"] = str(error)
    return document


def _crash_points(nemesis: Network) -> CrashPointClient | None:
    return nemesis.crash_points if isinstance(nemesis, StackNemesis) else None


def _crash_point_row(point: CrashPointInfo) -> dict[str, Any]:
    armed = point.armed
    return {"name": point.name, "layer": point.layer, "process": point.process,
            "action": armed.action if armed is not None else None,
            "probability": armed.probability if armed is not None else None,
            "count": armed.count if armed is not None else None,
            "delay_ms": armed.delay_ms if armed is not None else None, "hits": point.hits}


def _crash_point_line(row: dict[str, Any]) -> str:
    delay = f" {row['delay_ms']}ms" if row["action"] == "delay" else ""
    count = f" count={row['count']}" if row["count"] is not None else ""
    return (f"crash point {row['name']} ({row['layer']}, {row['process']}): {row['action']}{delay} "
            f"probability={row['probability']:g}{count}, {row['hits']} hit(s) so far")


def handle_list(args: argparse.Namespace) -> int:
    nemesis, stack = _nemesis(args)
    document = list_document(nemesis, stack)
    if args.json:
        print(json.dumps(document, indent=2))
        return 0
    for proxy in document["proxies"]:
        state = "enabled" if proxy["enabled"] else "DOWN"
        print(f"proxy {proxy['name']:<8} {state:<8} {proxy['listen']} -> {proxy['upstream']}")
    for toxic in document["toxics"]:
        shown = " ".join(f"{k}={v}" for k, v in toxic["attributes"].items())
        print(f"toxic {toxic['name']} on {toxic['proxy']}: {toxic['type']} {toxic['stream']} "
              f"{shown} toxicity={toxic['toxicity']:g}".replace("  ", " "))
    for process in document["processes"]:
        print(f"process {process['service']}: {process['status']}")
    for row in document["crash_points"]:
        print(_crash_point_line(row))
    if "crash_points_error" in document:
        print(f"crash points: unknown ({document['crash_points_error']})")
    if not document["toxics"] and not document["processes"] and not document["crash_points"] \
            and all(p["enabled"] for p in document["proxies"]) and "crash_points_error" not in document:
        print("no active faults")
    return 0


def handle_clear(args: argparse.Namespace) -> int:
    nemesis, _ = _nemesis(args)
    count = len(nemesis.list_toxics())
    crash_points = _crash_points(nemesis)
    armed = len(crash_points.armed()) if crash_points is not None else None
    nemesis.reset()  # a stack's reset disarms its crash points too, read back
    disarmed = f"; disarmed {armed} crash point(s)" if armed is not None else ""
    print(f"removed {count} toxic(s); every proxy enabled{disarmed}")
    return 0


def handle_crash_point(args: argparse.Namespace) -> int:
    if args.name not in CRASH_POINTS:
        raise FaultInputError(f"unknown crash point {args.name!r} (crash points: {', '.join(CRASH_POINTS)})")
    try:
        arming = check_arming(args.action, args.probability, args.count, args.delay)
    except NemesisInvalid as error:
        raise FaultInputError(f"crash point {args.name}: {error}") from None
    crash_points = _crash_points(_stack(args.root).nemesis())
    if crash_points is None:  # every stack's nemesis has them; a guard, not a path
        raise HarnessError("this stack has no crash points")
    point = crash_points.arm(args.name, arming)
    shown = point.armed.describe() if point.armed is not None else "fired its count already"
    print(f"armed crash point {point.name} ({point.layer}, {point.process}): {shown}, "
          f"{point.hits} hit(s) so far")
    return 0


def handle_proxy_toggle(args: argparse.Namespace) -> int:
    nemesis, _ = _nemesis(args)
    _check_proxy(nemesis, args.proxy)
    if args.enabled:
        nemesis.enable_proxy(args.proxy)
        print(f"proxy {args.proxy} up")
    else:
        nemesis.disable_proxy(args.proxy)
        print(f"proxy {args.proxy} down")
    return 0


def handle_process(args: argparse.Namespace) -> int:
    stack = _stack(args.root)
    action = ProcessAction(args.action)
    names = stack.info.service_names
    if args.service not in names:
        raise FaultInputError(f"unknown service {args.service!r} (services: {', '.join(names)})")
    action.perform(stack, args.service)
    print(f"{args.service} {action.past}")
    return 0
