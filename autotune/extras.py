"""Optional dependencies: say which extra to install instead of a ``ModuleNotFoundError`` traceback.

A plain ``pip install autotune`` brings the cost model, the search and the CLI. Pictures, reports
and notebook views need the ``report`` extra (matplotlib, jinja2, plotly, pandas), a PostgreSQL
study store the ``postgres`` extra (SQLAlchemy and psycopg). Commands check what they need before
any work with :func:`require` / :func:`require_storage`, which raise :class:`MissingExtraError`
(an :class:`~autotune.errors.AutotuneError`, so the CLI prints one line and exits with code 2; and
an ``ImportError``, so Python callers can catch it as one).
"""

from __future__ import annotations

import importlib.util
from typing import Iterable

from autotune.errors import AutotuneError

#: What each extra of pyproject.toml installs (import names).
EXTRAS = {"report": ("matplotlib", "jinja2", "plotly", "pandas"), "postgres": ("sqlalchemy", "psycopg")}
#: Modules of the report pictures and pages (plotly only for the interactive study views).
REPORT_MODULES = ("matplotlib", "jinja2")
STUDY_VIEW_MODULES = ("matplotlib", "jinja2", "plotly")


class MissingExtraError(AutotuneError, ImportError):
    """An optional dependency is not installed; the message names the ``pip install`` to run.

    Attributes:
        missing: the import names not found; extra: the autotune extra that installs them.
    """

    def __init__(self, message: str, *, missing: list[str], extra: str | None) -> None:
        self.missing = missing
        self.extra = extra
        super().__init__(message)


def installed(module: str) -> bool:
    """True when ``module`` can be imported (found on the path and not blocked in ``sys.modules``)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require(modules: Iterable[str], extra: str, what: str) -> None:
    """Raise unless every module in ``modules`` is installed.

    Args:
        modules: import names, e.g. ``("matplotlib", "jinja2")``.
        extra: the autotune extra that installs them (``report``, ``postgres``).
        what: what needs them, for the message (e.g. ``"autotune report"``).

    Raises:
        MissingExtraError: ``"{what} needs matplotlib, which is not installed: pip install
            'autotune[report]'"``.
    """
    missing = [m for m in modules if not installed(m)]
    if missing:
        verb = "is" if len(missing) == 1 else "are"
        raise MissingExtraError(f"{what} needs {', '.join(missing)}, which {verb} not installed: "
                                f"pip install 'autotune[{extra}]'", missing=missing, extra=extra)


#: Import names of the drivers SQLAlchemy loads for ``postgresql+<driver>://``.
_PG_DRIVERS = {"psycopg": "psycopg", "psycopg2": "psycopg2", "pg8000": "pg8000", "asyncpg": "asyncpg",
               "psycopg2cffi": "psycopg2cffi"}


def require_storage(storage: object) -> None:
    """Raise unless the modules a database URL needs are installed (SQLAlchemy, and for PostgreSQL
    its driver: ``postgresql://`` needs psycopg2 or psycopg, ``postgresql+psycopg://`` psycopg).
    Journal paths, ``None`` and storage objects need nothing.

    Raises:
        MissingExtraError: naming ``pip install 'autotune[postgres]'`` for PostgreSQL URLs.
    """
    if not isinstance(storage, str) or "://" not in storage:
        return
    scheme = storage.strip().split("://", 1)[0].lower()
    dialect, _, driver = scheme.partition("+")
    what = f"--storage {dialect}://"
    if dialect in ("postgresql", "postgres"):
        require(("sqlalchemy",), "postgres", what)
        if driver:
            require((_PG_DRIVERS.get(driver, driver),), "postgres", what)
        elif not (installed("psycopg2") or installed("psycopg")):
            raise MissingExtraError(f"{what} needs a PostgreSQL driver (psycopg or psycopg2), none is "
                                    "installed: pip install 'autotune[postgres]'", missing=["psycopg"],
                                    extra="postgres")
    elif not installed("sqlalchemy"):
        raise MissingExtraError(f"{what} needs sqlalchemy (and the database's driver), which is not "
                                "installed: pip install sqlalchemy", missing=["sqlalchemy"], extra=None)
