"""What every locustfile loads of the Chaos tab, whether or not a web UI runs: its
command-line options and the environment attribute that holds the tab. Standard
library only, so a headless Locust (every `harness run`) never imports the tab
itself (harness.webui.chaos, which brings Flask routes, the runner and the report:
a fifth of a Locust process's start)."""

from __future__ import annotations

from typing import Any

# The attribute of Locust's Environment that holds a ChaosTab (set by chaos.attach).
TAB_ATTRIBUTE = "harness_chaos_tab"


def add_options(parser: Any) -> None:
    """The tab's own options (not in the start form: they hold for the whole session).
    The stack is the one `--harness-root` names (G1's load option), default .harness."""
    # On the parser itself: Locust's own add_argument takes include_in_web_ui, a group's does not.
    hidden = {"include_in_web_ui": False} if hasattr(parser, "args_included_in_web_ui") else {}
    parser.add_argument("--chaos-runs-dir", default="runs", help="where each test start's run directory goes "
                        "(default runs)", **hidden)
    parser.add_argument("--chaos-plans-dir", default="", help="fault plans offered in the tab "
                        "(default: the plans bundled with the harness)", **hidden)
    parser.add_argument("--chaos-scenario", default="", help="scenario name in the run's settings "
                        "(default: the locustfile's name)", **hidden)
    parser.add_argument("--chaos-drain-timeout", type=float, default=30.0,
                        help="seconds the consumers may take to drain before the check (default 30)", **hidden)
    parser.add_argument("--chaos-check-on-stop", type=int, choices=(0, 1), default=1,
                        help="1: heal, drain, check and report when the test stops (default); 0: only "
                             "on Check now", **hidden)
