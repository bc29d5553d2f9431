"""Where studies live: a journal file (default for sweeps, no server) or a database URL.

A URL may carry a password. It never leaves this module unmasked: :func:`mask_url` renders it with
``***`` in place of the password, and :func:`redact` scrubs the password (and the raw URL) out of
any text, e.g. a driver's error message, before it is logged or raised.
"""

from __future__ import annotations

import importlib.util
import re
import time
from pathlib import Path
from typing import Any

from autotune.errors import ConfigError

#: Journal file used under ``--out`` when no storage is given.
DEFAULT_JOURNAL = "sweep.journal"

_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^:/@\s]*):(?P<pw>[^@\s]*)@")


def is_url(target: str) -> bool:
    """True for a database URL (``scheme://…``), False for a journal file path."""
    return "://" in target


def _password(target: str) -> str | None:
    m = _USERINFO.search(target)
    if m and m.group("pw"):
        return m.group("pw")
    return None


def mask_url(target: str) -> str:
    """The storage as it may be shown: ``postgresql+psycopg://user:***@host/db``; paths unchanged."""
    return _USERINFO.sub(lambda m: f"{m.group('scheme')}{m.group('user')}:***@", target)


def redact(text: str, target: str | None) -> str:
    """``text`` with the URL's password (raw and URL-decoded) replaced by ``***``."""
    if not target:
        return text
    out = text.replace(target, mask_url(target))
    pw = _password(target)
    if pw:
        from urllib.parse import unquote

        for secret in {pw, unquote(pw)}:
            if secret:
                out = out.replace(secret, "***")
    return out


def normalize_url(url: str) -> str:
    """``postgresql://`` means psycopg2 to SQLAlchemy; use psycopg 3 when psycopg2 is absent."""
    if url.startswith(("postgresql://", "postgres://")) and importlib.util.find_spec("psycopg2") is None \
            and importlib.util.find_spec("psycopg") is not None:
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def resolve_target(storage: str | None, out_dir: str | Path) -> str:
    """The storage string workers use: the URL (normalized) or the journal file path (absolute)."""
    if storage:
        storage = storage.strip()
        if is_url(storage):
            return normalize_url(storage)
        return str(Path(storage).expanduser().resolve())
    return str((Path(out_dir) / DEFAULT_JOURNAL).resolve())


def open_storage(target: str, *, attempts: int = 5) -> Any:
    """An Optuna storage object for ``target``: for a URL the search's
    :func:`autotune.tuner.runner.make_rdb_storage` (on PostgreSQL: a heartbeat per running trial, and
    a trial whose worker died is failed and re-queued by Optuna), a journal file otherwise. A worker
    opens it once and passes the object to every search it runs (one connection pool per worker).

    Several hosts may open a fresh database at once; schema creation can race, so opening is
    retried a few times. Failures become a :class:`ConfigError` with the password masked.
    """
    import optuna

    from autotune.tuner.runner import make_rdb_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if not is_url(target):
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        p = Path(target)
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            return JournalStorage(JournalFileBackend(str(p)))
        except OSError as exc:
            raise ConfigError(f"cannot open the journal file: {exc}", field="--storage", value=str(p),
                              rule="storage") from None
    last: Exception | None = None
    for i in range(attempts):
        try:
            return make_rdb_storage(target)
        except Exception as exc:  # noqa: BLE001 - driver errors vary; masked and re-raised below
            last = exc
            text = str(exc).lower()
            if not ("already exists" in text or "duplicate" in text or "unique" in text):
                break  # only a schema-creation race is worth retrying; bad URL/host/auth is not
            time.sleep(0.5 * (i + 1))
    msg = redact(str(last).splitlines()[0] if last and str(last) else type(last).__name__, target)
    raise ConfigError(f"cannot open the study storage {mask_url(target)}: {msg}", field="--storage",
                      value=mask_url(target), rule="storage")
