"""Output paths of the commands, checked before any work starts.

A search can take minutes; an output that cannot be written (an existing file without ``--force``,
a folder that is not writable, a path under a file) must stop it at once with a one-line error,
not after the work, throwing the result away. Every command checks its output paths with these
functions first, and writes with :func:`write_text` later. A missing folder on the way is created
when the file is written (the check needs its nearest existing folder to take a new file).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Iterable

from autotune.errors import ConfigError


def _writable_parent(path: Path, option: str) -> None:
    """The nearest existing ancestor of ``path`` must be a writable folder (it is created later)."""
    anc = path.parent
    while not anc.exists():
        if anc.parent == anc:
            break
        anc = anc.parent
    if anc.exists() and not anc.is_dir():
        raise ConfigError(f"cannot write {path}: {anc} is a file, not a folder", field=option,
                          value=str(path), rule="R_UNWRITABLE")
    if not os.access(anc, os.W_OK | os.X_OK):
        raise ConfigError(f"cannot write {path}: the folder {anc} is not writable", field=option,
                          value=str(path), rule="R_UNWRITABLE")
    _probe(anc, path, option)


def _probe(folder: Path, path: Path, option: str) -> None:
    """Create and remove a temporary file in the existing ``folder``: what os.access cannot see
    (root is "allowed" everywhere, yet /proc or a read-only mount takes no new file) stops the
    command here too, not after the search."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        raise ConfigError(f"cannot write {path}: no file can be created in {folder} ({e.strerror or e})",
                          field=option, value=str(path), rule="R_UNWRITABLE") from None


def check_out_file(path: str | Path | None, *, force: bool, option: str = "--out") -> None:
    """Raise unless ``path`` (a file to write; None = not asked for) can be written now.

    Raises:
        ConfigError: ``path`` is a folder; it exists and ``force`` is False (rule ``overwrite``,
            naming ``--force``); or its folder cannot be created or written (``R_UNWRITABLE``).
    """
    if path is None:
        return
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{path} is a folder; give a file name", field=option, value=str(path),
                          rule="R_UNWRITABLE")
    if p.exists():
        if not force:
            raise ConfigError(f"{path} exists; pass --force to overwrite it", field=option, value=str(path),
                              rule="overwrite")
        if not os.access(p, os.W_OK):
            raise ConfigError(f"cannot write {path}: the file is read-only", field=option, value=str(path),
                              rule="R_UNWRITABLE")
    _writable_parent(p, option)


def check_out_dir(path: str | Path | None, *, force: bool, option: str = "--out",
                  names: Iterable[str] = (), patterns: Iterable[str] = ()) -> None:
    """Raise unless the folder ``path`` (None = not asked for) can take the files ``names`` (and
    files matching the glob ``patterns``) now.

    An existing folder is fine; files in it that would be overwritten need ``force``.

    Raises:
        ConfigError: ``path`` is a file; it holds one of the files and ``force`` is False (rule
            ``overwrite``, naming the file and ``--force``); or it cannot be written (``R_UNWRITABLE``).
    """
    if path is None:
        return
    d = Path(path)
    if d.exists() and not d.is_dir():
        raise ConfigError(f"{path} exists and is not a folder", field=option, value=str(path), rule="out_dir")
    if d.is_dir():
        if not force:
            clash = sorted({n for n in names if (d / n).exists()}
                           | {q.name for pat in patterns for q in d.glob(pat)})
            if clash:
                more = f" (and {len(clash) - 3} more)" if len(clash) > 3 else ""
                raise ConfigError(f"{path} already holds {', '.join(clash[:3])}{more}; pass --force to "
                                  f"overwrite them", field=option, value=str(path), rule="overwrite")
        if not os.access(d, os.W_OK | os.X_OK):
            raise ConfigError(f"cannot write into {path}: the folder is not writable", field=option,
                              value=str(path), rule="R_UNWRITABLE")
        _probe(d, d, option)
        return
    _writable_parent(d / "x", option)


def write_text(path: str | Path, text: str, option: str = "--out") -> None:
    """Write ``text`` to ``path`` (UTF-8, line endings as they are in ``text``), creating its folder;
    checked by :func:`check_out_file`.

    Raises:
        ConfigError: the write failed all the same (``R_UNWRITABLE``: e.g. the disk filled up
            since the check), one line naming ``option`` and the path, not a traceback.
    """
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8", newline="")
    except OSError as e:
        raise ConfigError(f"cannot write {path}: {e.strerror or e}", field=option, value=str(path),
                          rule="R_UNWRITABLE") from None
