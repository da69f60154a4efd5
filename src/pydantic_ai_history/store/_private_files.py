"""Directories and files only their owner can read, whatever the process's umask.

The spill store and the SQLite cache hold what users and tools said, summaries of it included: what this
package creates on disk is 0700 (directories) and 0600 (files). A umask can only take permissions away, and
an odd one (0o277) would leave the owner unable to write, so modes are set explicitly after creation.
Directories and files that already exist are the operator's: left as they are.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
O_NOFOLLOW = getattr(os, 'O_NOFOLLOW', 0)


def make_private_dirs(path: Path) -> None:
    """Create `path` and its missing parents, each one created 0700 (existing ones are left alone);
    `FileExistsError` when something other than a directory is in the way."""
    missing: list[Path] = []
    current = path
    while not current.exists() and current != current.parent:
        missing.append(current)
        current = current.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=PRIVATE_DIR_MODE)
        except FileExistsError:
            continue  # another process made it a moment ago: it is theirs to set
        os.chmod(folder, PRIVATE_DIR_MODE)
    if not path.is_dir():  # as `mkdir(exist_ok=True)` says of a file in the way
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(path))


def create_private_file(path: Path, data: bytes = b'') -> bool:
    """Create `path` 0600 holding `data` (synced to disk) unless it exists; True when it was created here."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_NOFOLLOW, PRIVATE_FILE_MODE)
    except FileExistsError:
        return False
    with open(fd, 'wb') as f:
        set_private_mode(fd)
        if data:
            f.write(data)
            f.flush()
            os.fsync(fd)
    return True


def set_private_mode(fd: int) -> None:
    """Make the open file `fd` 0600 (where the platform has `fchmod`)."""
    if hasattr(os, 'fchmod'):
        os.fchmod(fd, PRIVATE_FILE_MODE)
