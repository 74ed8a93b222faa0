"""Files and folders that hold a stack's secrets, private to the user who runs it.

A stack's state (`ROOT/state.json`: the webhook secret and the app's internal bearer
token), its settings (`ROOT/stack-settings.json`) and the registry's records (leases
name the processes and faults a harness owns) are readable by their owner only:

- `private_dir(path)`: the folder exists with mode 0700 (created so, or tightened if
  it was there already). Missing parents are created 0700 too.
- `write_private(path, text)`: the file is replaced atomically (a temp file in the
  same folder, then `os.replace`), created with `os.open(..., 0o600)` and set to
  0600 with `fchmod`, so neither the umask nor an older, wider file decides its mode.

Nothing here relies on the umask: a umask of 022 (files 0644) is the usual default.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Final

DIR_MODE: Final = 0o700
FILE_MODE: Final = 0o600


def private_dir(path: Path) -> Path:
    """`path` as a folder of mode 0700 (created with its missing parents 0700)."""
    path = Path(path)
    missing = []
    current = path
    while not current.exists() and current != current.parent:
        missing.append(current)
        current = current.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=DIR_MODE)
        except FileExistsError:
            pass  # made by another process in between: its mode is set below
        if folder != path:
            os.chmod(folder, DIR_MODE)  # mkdir's mode is masked by the umask
    os.chmod(path, DIR_MODE)
    return path


def write_private(path: Path, text: str) -> None:
    """Replace `path` atomically with `text`, mode 0600 (a reader never sees half a file)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)  # a leftover temp file of this name may have been wider
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            fd = -1
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
