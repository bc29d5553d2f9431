"""Who runs which scenario: claims kept beside the study store, not as studies.

A claim is ``(study_name, gen) -> owner`` (host, pid, worker id), a ``beat`` counter and a
``released`` flag. Generation 0 is the first claim of a scenario; a takeover claims ``gen + 1``.
Exactly one worker wins each ``(study_name, gen)``:

- **database** (:class:`SqlClaims`): a row of the table ``autotune_sweep_claims`` in the study
  database, primary key ``(study_name, gen)``; the one ``INSERT`` that succeeds wins, the others
  get an integrity error. Heartbeats are ``UPDATE``\\ s of ``beat``.
- **journal file** (:class:`JournalClaims`): a second append-only log next to the journal
  (``<journal>.claims``), written with Optuna's own :class:`JournalFileBackend` (the same file
  lock and ``fsync`` as the study journal). Appends are serialized by the lock, so the file order
  is one order every reader sees: the first ``claim`` line of a ``(study_name, gen)`` wins.

Why not studies or study attributes: one pseudo-study per claim (``<study>.claim.<gen>``, the old
protocol) filled the dashboard's study list with two or more entries per scenario; study user
attributes have no compare-and-set, so two workers could both believe they own a scenario; and
Optuna trials in a claims study cannot be ordered by commit time on a database (their ids are given
at insert, before commit). A table and a side log are the stores' own atomic primitives, and
optuna-dashboard shows only the real scenario studies.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TABLE = "autotune_sweep_claims"
CLAIMS_SUFFIX = ".claims"


@dataclass
class Claim:
    """The latest claim of a scenario: its generation, owner attributes, beat count, released."""

    gen: int
    owner: dict[str, Any] = field(default_factory=dict)
    beat: int = 0
    released: bool = False


class JournalClaims:
    """Claims in ``<journal>.claims`` (see the module docstring).

    Args:
        journal_path: the sweep's study journal file; the claims log sits next to it.
    """

    def __init__(self, journal_path: str) -> None:
        from optuna.storages.journal import JournalFileBackend  # noqa: PLC0415 - optuna: heavy

        self.path = str(journal_path) + CLAIMS_SUFFIX
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._log = JournalFileBackend(self.path)
        self._n = 0                                   # log lines replayed so far
        self._claims: dict[tuple[str, int], dict[str, Any]] = {}

    def _sync(self) -> None:
        for entry in self._log.read_logs(self._n):
            self._n += 1
            key = (entry.get("study"), entry.get("gen"))
            op = entry.get("op")
            if op == "claim" and key not in self._claims:
                self._claims[key] = {"token": entry["token"], "owner": entry.get("owner", {}), "beat": 0,
                                     "released": False}
            elif op == "beat" and key in self._claims and self._claims[key]["token"] == entry.get("token"):
                self._claims[key]["beat"] = entry.get("n", 0)
            elif op == "release" and key in self._claims and self._claims[key]["token"] == entry.get("token"):
                self._claims[key]["released"] = True
            elif op == "reset":
                self._claims = {k: v for k, v in self._claims.items() if k[0] != entry.get("study")}

    def claim(self, study_name: str, gen: int, owner: dict[str, Any]) -> str | None:
        """Try to win ``(study_name, gen)``; returns the claim's token when won, else None."""
        token = uuid.uuid4().hex
        self._log.append_logs([{"op": "claim", "study": study_name, "gen": gen, "token": token,
                                "owner": owner}])
        self._sync()
        won = self._claims.get((study_name, gen), {}).get("token") == token
        return token if won else None

    def beat(self, study_name: str, gen: int, token: str, n: int) -> None:
        self._log.append_logs([{"op": "beat", "study": study_name, "gen": gen, "token": token, "n": n}])

    def release(self, study_name: str, gen: int, token: str) -> None:
        self._log.append_logs([{"op": "release", "study": study_name, "gen": gen, "token": token}])

    def is_current(self, study_name: str, gen: int) -> bool:
        """True while no later generation of the scenario has been claimed."""
        self._sync()
        return (study_name, gen + 1) not in self._claims

    def latest(self, study_names: list[str]) -> dict[str, Claim]:
        """Study name -> its latest claim (scenarios never claimed are absent)."""
        self._sync()
        out: dict[str, Claim] = {}
        for (name, gen), c in self._claims.items():
            if name in study_names and (name not in out or gen > out[name].gen):
                out[name] = Claim(gen, dict(c["owner"]), c["beat"], c["released"])
        return out

    def reset(self, study_names: list[str]) -> None:
        """Forget every claim of these scenarios (``--fresh``)."""
        self._log.append_logs([{"op": "reset", "study": n} for n in study_names])


class SqlClaims:
    """Claims in the table ``autotune_sweep_claims`` of the study database (see the module
    docstring).

    Args:
        engine: the SQLAlchemy engine of the worker's ``RDBStorage`` (one connection pool).

    Raises:
        sqlalchemy errors when the table cannot be created (callers retry storage errors).
    """

    def __init__(self, engine: Any) -> None:
        import sqlalchemy as sa  # noqa: PLC0415 - optional (the postgres extra)

        self.sa, self.engine = sa, engine
        meta = sa.MetaData()
        self.table = sa.Table(
            TABLE, meta,
            sa.Column("study_name", sa.String(512), primary_key=True),
            sa.Column("gen", sa.Integer, primary_key=True, autoincrement=False),
            sa.Column("token", sa.String(64), nullable=False),
            sa.Column("owner", sa.Text, nullable=False),
            sa.Column("beat", sa.Integer, nullable=False, default=0),
            sa.Column("released", sa.Boolean, nullable=False, default=False))
        for attempt in range(5):
            try:
                meta.create_all(engine, checkfirst=True)
                break
            except sa.exc.SQLAlchemyError:
                # hosts that start together race on CREATE TABLE; the loser finds the table there
                # once the winner has committed
                if sa.inspect(engine).has_table(TABLE):
                    break
                if attempt == 4:
                    raise
                time.sleep(0.2 * (attempt + 1))

    def claim(self, study_name: str, gen: int, owner: dict[str, Any]) -> str | None:
        token = uuid.uuid4().hex
        try:
            with self.engine.begin() as conn:
                conn.execute(self.table.insert().values(study_name=study_name, gen=gen, token=token,
                                                        owner=json.dumps(owner), beat=0, released=False))
        except self.sa.exc.IntegrityError:
            return None
        return token

    def _update(self, study_name: str, gen: int, token: str, **values: Any) -> None:
        t = self.table
        with self.engine.begin() as conn:
            conn.execute(t.update().where(t.c.study_name == study_name, t.c.gen == gen, t.c.token == token)
                         .values(**values))

    def beat(self, study_name: str, gen: int, token: str, n: int) -> None:
        self._update(study_name, gen, token, beat=n)

    def release(self, study_name: str, gen: int, token: str) -> None:
        self._update(study_name, gen, token, released=True)

    def is_current(self, study_name: str, gen: int) -> bool:
        t = self.table
        with self.engine.connect() as conn:
            row = conn.execute(self.sa.select(t.c.gen).where(t.c.study_name == study_name, t.c.gen > gen)
                               .limit(1)).first()
        return row is None

    def latest(self, study_names: list[str]) -> dict[str, Claim]:
        t = self.table
        out: dict[str, Claim] = {}
        with self.engine.connect() as conn:
            rows = conn.execute(self.sa.select(t.c.study_name, t.c.gen, t.c.owner, t.c.beat, t.c.released)
                                .where(t.c.study_name.in_(list(study_names)))).all()
        for name, gen, owner, beat, released in rows:
            if name not in out or gen > out[name].gen:
                out[name] = Claim(int(gen), json.loads(owner), int(beat), bool(released))
        return out

    def reset(self, study_names: list[str]) -> None:
        t = self.table
        with self.engine.begin() as conn:
            conn.execute(t.delete().where(t.c.study_name.in_(list(study_names))))


def open_claims(storage: Any, target: str) -> JournalClaims | SqlClaims:
    """The claims board of a study store: the database table for an ``RDBStorage``, the side log
    of the journal file otherwise."""
    engine = getattr(storage, "engine", None)
    if engine is not None:
        return SqlClaims(engine)
    return JournalClaims(target)
