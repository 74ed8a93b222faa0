"""The nemesis (Jepsen's word): faults, fault plans and their schedule, through Toxiproxy,
the stack and the app's crash points.

- `faults`: the fault types, each applying, healing, describing and recording itself
  (the `Fault` protocol), and `ProcessAction`, the one list of process actions;
- `plans`: the plan format, its checks (targets included) and `schedule`;
- `runner`: `NemesisRunner`, a schedule beside the load, and its `NemesisReport`;
- `toxiproxy_client`: `Nemesis`, a verifying client of the Toxiproxy API;
- `crash_points`: `CrashPointClient`, a verifying client of the app's crash points;
- `stack_proxies`: `StackNemesis`, one stack's proxies by their plain names (and its
  app's crash points).

Details: docs/nemesis.md.
"""
