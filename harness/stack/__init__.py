"""The stack (Jepsen's db): Redis, Toxiproxy, the app and its consumers, local or under compose.

`info` (state.json as `StackInfo`), `settings` (`StackSettings`), `protocol` (the
`Stack` both handles implement) and `control` (the supervisor's socket client) are
shared; `local` (the supervisor-backed handle, and `start_stack`/`open_stack`, which
pick local or compose) imports `compose`, never the other way round. `registry` (every
stack and set of faults this checkout started, on disk) and `lifeline` (how a harness
process and everything it started die, even after SIGKILL) own the stack's processes.
docs/stack.md.
"""
