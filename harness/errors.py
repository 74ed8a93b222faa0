"""The root of the harness's exception tree.

Everything the harness raises when *it* could not do its job derives from
`HarnessError`; the CLI turns it into exit code 2. A violated invariant is never an
exception: it is a result (exit code 1).
"""

from __future__ import annotations


class HarnessError(Exception):
    """The harness itself failed: bad input, a service that would not start,
    a fault that could not be applied, a drain that timed out."""
