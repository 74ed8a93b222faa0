"""A private `HARNESS_REGISTRY` for a test package's session.

`registry_for_session` is the body of a session fixture: each package that starts stacks
or harness processes declares it (autouse) in its own conftest, so that `down --all`
and the leases of its tests never reach a stack another session, another test
package or a person started from this checkout. The previous value is restored at
the end of the session.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.stack.registry import REGISTRY_ENV


def registry_for_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh registry directory, named by HARNESS_REGISTRY until the generator ends."""
    path = tmp_path_factory.mktemp("registry")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(REGISTRY_ENV, str(path))
        yield path
