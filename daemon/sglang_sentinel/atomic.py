"""Atomic replacement of a small file: the old version or the new one, never half of one.

Used for every whole document the daemon keeps on disk (calibration results, state-directory
documents, the supervisor's restart history). The temporary file lives in the target's own
directory so the rename never crosses a filesystem; it is fsynced before the rename and the
directory after it, so a power cut right after the call returns keeps the new version.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

__all__ = ["atomic_write_bytes", "fsync_dir"]


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically; OSError (the target untouched) on failure.

    The temporary name starts with a dot and ends in ``.tmp`` so directory listings by a
    pattern (``calibration-*.json``) never see a half-written file.
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable; best effort (some filesystems refuse the open)."""
    with contextlib.suppress(OSError):
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
