"""The harness's exit codes, defined once: every command and the smoke job return these.

0   every invariant held and the run proved enough (PASS)
1   an invariant was violated (FAIL): the verdict the harness exists to give
2   the harness could not do its job, or the command line was wrong (a one-line message)
3   the run proved too little to judge (INCONCLUSIVE): a promised path never ran, or
    fewer operations were acknowledged than `--min-acknowledged`
128+N  stopped by signal N (130 for Ctrl-C, 143 for SIGTERM), faults healed
"""

from __future__ import annotations

from typing import Final

EXIT_OK: Final = 0
EXIT_VIOLATION: Final = 1
EXIT_HARNESS: Final = 2
EXIT_INCONCLUSIVE: Final = 3

VERDICT_EXIT_CODES: Final = {"pass": EXIT_OK, "fail": EXIT_VIOLATION, "inconclusive": EXIT_INCONCLUSIVE}
