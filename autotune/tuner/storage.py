"""Where studies live: a journal file (default for sweeps, no server) or a database URL.

Everything about opening a study store is here (URL handling, journal files, ``RDBStorage`` with
heartbeats and the retry of a dead worker's trial); :mod:`autotune.tuner.runner` imports from this
module, never the other way round. Optuna and SQLAlchemy are imported only inside the functions
that need them, so the URL helpers load neither.

A URL may carry a password. It never leaves this module unmasked: :func:`mask_url` shows the URL
with ``***`` in place of its password component only (scheme, user, host, port and database stay
readable), and :func:`redact` replaces every spelling of the URL in a text (e.g. a driver's error
message) by the masked one. The password on its own is never searched for in free text: a short
password such as ``p`` or ``5432`` would otherwise mangle words and port numbers.
"""

from __future__ import annotations

import importlib.util
import re
import time
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from autotune.errors import ConfigError

#: Journal file used under ``--out`` when no storage is given.
DEFAULT_JOURNAL = "sweep.journal"
#: Seconds between the heartbeats a running trial writes to an RDB storage (Optuna's own thread).
HEARTBEAT_INTERVAL_S = 1
#: A RUNNING trial whose last heartbeat is older than this (s) is failed by Optuna and retried.
GRACE_PERIOD_S = 3
#: How many times one trial is retried after its worker died (then it stays FAIL).
MAX_RETRY = 3
#: ``origin`` user attribute of the search's final local-search trial: never retried (the next run
#: derives it again from the study's best trial).
POLISH_ORIGIN = "local-polish"

_QUERY_PASSWORD = re.compile(r"(?i)(?P<key>[?&]password=)(?P<pw>[^&#]*)")


def is_url(target: str) -> bool:
    """True for a database URL (``scheme://…``), False for a journal file path."""
    return "://" in target


def _split_userinfo(target: str) -> tuple[str, str, str, str | None] | None:
    """(scheme, user, rest after the userinfo, password or None) of a URL with a userinfo part.

    The userinfo ends at the **last** ``@`` before the query: a password with a raw ``@`` or
    ``/`` in it (not percent-encoded, as RFC 3986 wants) is still masked whole. SQLAlchemy's own
    ``URL.render_as_string(hide_password=True)`` masks the same component of a well-formed URL
    (the tests compare both), but for ``u:p@ss@host`` it reads the password as ``p`` and shows
    ``ss@host``.
    """
    if not is_url(target):
        return None
    scheme, rest = target.split("://", 1)
    q = rest.find("?")
    at = rest.rfind("@", 0, q if q >= 0 else len(rest))
    if at < 0:
        return None
    user, sep, pw = rest[:at].partition(":")
    return scheme, user, rest[at + 1:], (pw if sep else None)


def _query_password(target: str) -> str | None:
    m = _QUERY_PASSWORD.search(target)
    return m.group("pw") if m and m.group("pw") else None


def mask_url(target: str) -> str:
    """The storage as it may be shown: ``postgresql+psycopg://user:***@host:5432/db``.

    Only the password component is replaced (the userinfo password and a ``password=`` query
    parameter); journal paths and URLs without a password are returned unchanged.
    """
    parts = _split_userinfo(target)
    out = target
    if parts is not None and parts[3] is not None:
        scheme, user, rest, _ = parts
        out = f"{scheme}://{user}:***@{rest}"
    return _QUERY_PASSWORD.sub(lambda m: m.group("key") + "***", out) if is_url(out) else out


def _secret_forms(target: str) -> list[str]:
    """Every spelling of the URL that may show up in a message, longest first (raw, URL-decoded,
    normalized driver name, SQLAlchemy's rendering)."""
    forms = {target, unquote(target), normalize_url(target)}
    if importlib.util.find_spec("sqlalchemy") is not None:
        from sqlalchemy.engine import make_url  # noqa: PLC0415 - SQLAlchemy comes with optuna and is heavy; only a database URL needs it

        try:
            forms.add(make_url(target).render_as_string(hide_password=False))
        except Exception:  # noqa: BLE001 - an unparsable URL has no other spelling
            pass
    return sorted((f for f in forms if f), key=len, reverse=True)


def redact(text: str, target: str | None) -> str:
    """``text`` with every spelling of the storage URL replaced by :func:`mask_url`'s, and a
    driver's ``password=<the password>`` key-value shown as ``password=***``.

    The bare password is not searched for elsewhere in the text (a password ``p`` must not turn
    "import" into "im***ort").
    """
    if not target or not is_url(target):
        return text
    masked = mask_url(target)
    if masked == target:
        return text
    out = text
    for form in _secret_forms(target):
        if form != masked:
            out = out.replace(form, masked)
    parts = _split_userinfo(target)
    for pw in {parts[3] if parts else None, _query_password(target)}:
        if pw:
            for secret in {pw, unquote(pw)}:
                out = re.sub(r"(?i)(password\s*=\s*['\"]?)" + re.escape(secret) + r"(?=['\"\s,;)&]|$)",
                             lambda m: m.group(1) + "***", out)
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


def is_storage_error(exc: BaseException) -> bool:
    """True for errors of the study store itself (database driver / SQLAlchemy, the file system,
    Optuna's storage errors, or a NameError Optuna raised while handling one), which a worker
    retries with backoff; False for everything else."""
    import optuna  # noqa: PLC0415 - optuna is heavy (~1 s); `autotune check` / `evaluate` never load it

    try:
        from sqlalchemy.exc import SQLAlchemyError  # noqa: PLC0415 - SQLAlchemy comes with optuna and is heavy; only a database URL needs it
    except ImportError:  # pragma: no cover - without the [postgres] extra
        SQLAlchemyError = ()  # type: ignore[assignment,misc]  # noqa: N806
    kinds = (SQLAlchemyError, OSError, optuna.exceptions.StorageInternalError)
    # Optuna's _run_trial (optuna/study/_optimize.py, 4.x) reads the trial back when tell() fails;
    # when that read fails too, its `finally` raises UnboundLocalError('updated_state') over the
    # storage error. Look through such a NameError to the error it was raised over.
    while isinstance(exc, NameError) and exc.__context__ is not None:
        exc = exc.__context__
    return isinstance(exc, kinds)


class RetryStaleTrial:
    """Optuna's retry of a failed (heartbeat-stale or dead-worker) trial — re-queued WAITING with
    the same parameters and user attributes, ``system_attrs['failed_trial']`` naming the original
    (:class:`optuna.storages.RetryHeartbeatStaleTrialCallback`) — except the final
    ``local-polish`` trial, which the next search derives again.

    Args:
        max_retry: how many times one trial is re-queued (then it stays FAIL).
    """

    def __init__(self, max_retry: int | None = MAX_RETRY) -> None:
        self.max_retry = max_retry

    def __call__(self, study: Any, trial: Any) -> None:

        import optuna  # noqa: PLC0415 - optuna is heavy (~1 s); `autotune check` / `evaluate` never load it

        if trial.user_attrs.get("origin") == POLISH_ORIGIN:
            return
        with warnings.catch_warnings():  # "experimental" in Optuna 5: not a warning per retried trial
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=self.max_retry)(study, trial)


def make_rdb_storage(url: str, *, heartbeat_interval: int | None = HEARTBEAT_INTERVAL_S,
                     grace_period: int | None = GRACE_PERIOD_S, max_retry: int | None = MAX_RETRY,
                     engine_kwargs: dict[str, Any] | None = None) -> Any:
    """``optuna.storages.RDBStorage`` for a SQLAlchemy URL, with heartbeats on server databases.

    On PostgreSQL / MySQL URLs a running trial writes a heartbeat every ``heartbeat_interval`` s
    (Optuna's thread); a trial silent for ``grace_period`` s (its worker died) is failed by Optuna
    at the next ``optimize`` of the study, or by :func:`optuna.storages.fail_stale_trials`, and
    re-queued by :class:`RetryStaleTrial` (at most ``max_retry`` times). SQLite URLs get no
    heartbeat (a single host; a dead process leaves its trial RUNNING, as Optuna does).
    ``heartbeat_interval=None`` turns heartbeats off. Connections are checked before use
    (``pool_pre_ping``), so a database restart between two operations is not an error.

    Optuna 5 deprecates ``failed_trial_callback=RetryFailedTrialCallback(...)`` (warning, removal
    in 6.0); the same retry is passed as ``heartbeat_stale_trial_callback``.

    Raises:
        whatever SQLAlchemy / the driver raises for a bad URL or an unreachable server (callers
        mask the password with :func:`redact` before showing it).
    """

    import optuna  # noqa: PLC0415 - optuna is heavy (~1 s); `autotune check` / `evaluate` never load it

    kwargs: dict[str, Any] = {"engine_kwargs": {"pool_pre_ping": True, **(engine_kwargs or {})}}
    with warnings.catch_warnings():  # heartbeats are "experimental" in Optuna 5: no warning per open
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if heartbeat_interval is not None and not url.startswith("sqlite"):
            kwargs.update(heartbeat_interval=int(heartbeat_interval),
                          grace_period=int(grace_period) if grace_period is not None else None,
                          heartbeat_stale_trial_callback=RetryStaleTrial(max_retry=max_retry))
        return optuna.storages.RDBStorage(url, **kwargs)


def open_storage(target: str, *, attempts: int = 5) -> Any:
    """An Optuna storage object for ``target``: for a URL :func:`make_rdb_storage` (on
    PostgreSQL: a heartbeat per running trial, and a trial whose worker died is failed and
    re-queued by Optuna), a journal file otherwise. A worker opens it once and passes the object
    to every search it runs (one connection pool per worker).

    Several hosts may open a fresh database at once; schema creation can race, so opening is
    retried a few times.

    Raises:
        ConfigError: the journal file cannot be created, or the database cannot be opened (rule
            ``storage``, the password masked).
    """
    import optuna  # noqa: PLC0415 - optuna is heavy (~1 s); `autotune check` / `evaluate` never load it

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if not is_url(target):
        from optuna.storages.journal import JournalFileBackend, JournalStorage  # noqa: PLC0415 - optuna is heavy (~1 s); `autotune check` / `evaluate` never load it

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
