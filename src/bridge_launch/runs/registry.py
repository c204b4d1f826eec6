"""The run registry: one SQLite file in the state dir, the only state bridge-launch keeps.

Every submission is a row (run id, recipe, cluster, backend, state, job ids, run dir,
lineage). SQLite in WAL mode with a busy timeout makes concurrent CLI invocations safe;
each write is one short transaction.
"""

from __future__ import annotations

import json
import secrets as _random
import sqlite3
import time
from pathlib import Path

from bridge_launch.core import paths
from bridge_launch.core.errors import UsageError
from bridge_launch.job.run import STATES as STATES
from bridge_launch.job.run import TERMINAL as TERMINAL
from bridge_launch.job.run import Run as Run

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id       TEXT PRIMARY KEY,
    created      REAL NOT NULL,
    updated      REAL NOT NULL,
    recipe       TEXT NOT NULL,
    cluster      TEXT NOT NULL,
    backend      TEXT NOT NULL,
    state        TEXT NOT NULL,
    reason       TEXT NOT NULL DEFAULT '',
    job_ids      TEXT NOT NULL DEFAULT '[]',
    run_dir      TEXT NOT NULL DEFAULT '',
    resumed_from TEXT,
    chain        TEXT,
    info         TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS runs_created ON runs (created DESC);
"""
# Experiments (named groups of runs submitted together), beside `runs`: older state dirs gain these
# tables on first open and older bridge-launch versions never read them.
_EXPERIMENTS = """
CREATE TABLE IF NOT EXISTS experiments (
    name    TEXT PRIMARY KEY,
    created REAL NOT NULL,
    spec    TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS experiment_runs (
    experiment TEXT NOT NULL,
    run_id     TEXT NOT NULL,
    position   INTEGER NOT NULL,
    label      TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (experiment, run_id)
);
"""


def _wal(db: sqlite3.Connection, wait: float = 30.0) -> None:
    """Put the registry in WAL mode, once, whoever gets there first.

    Switching needs the file to itself, and SQLite answers "database is locked" at once, without
    its busy handler, when another process opened the new file in the meantime: of 20 submits
    into a fresh state dir, one failed like this in 25 of 160 tries. So the switch is retried
    (short random sleeps, `wait` seconds in all); by then the file is usually WAL already, which
    `PRAGMA journal_mode` reads from its header."""
    deadline = time.monotonic() + wait
    while True:
        try:
            if db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                db.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.005 + _random.randbelow(45) / 1000)


class ChainBusy(UsageError):
    """A resume was asked for while a run of the same chain is queued or running."""


class Registry:
    def __init__(self, root: Path | None = None):
        self.path = Path(root) / paths.registry_file().name if root else paths.registry_file()
        self.root = self.path.parent
        self.root.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA busy_timeout = 30000")
        _wal(self.db)
        self.db.executescript(_SCHEMA)
        self.db.executescript(_EXPERIMENTS)

    def close(self) -> None:
        self.db.close()

    # -- writes -------------------------------------------------------------------------
    def reserve(self, recipe: str, cluster: str, backend: str, *, resumed_from=None, chain=None) -> Run:
        """Insert a SUBMITTING row under a fresh, short, readable id. With a chain (a
        resume), the insert happens only if no run of that chain is still active, in one
        immediate transaction, so of two concurrent resumes exactly one wins."""
        now = time.time()
        stem = recipe[:24].strip("-")
        day = time.strftime("%m%d", time.localtime(now))
        for _ in range(50):
            run_id = f"{stem}-{day}-{_random.token_hex(2)}"
            self.db.execute("BEGIN IMMEDIATE")
            try:
                if self.db.execute("SELECT 1 FROM experiments WHERE name = ?", (run_id,)).fetchone():
                    raise sqlite3.IntegrityError  # one name, one thing: an experiment holds this one
                if chain:
                    marks = ",".join("?" * len(TERMINAL))
                    busy = self.db.execute(
                        f"SELECT run_id, state FROM runs WHERE chain = ? AND state NOT IN ({marks}) LIMIT 1",
                        (chain, *TERMINAL),
                    ).fetchone()
                    if busy:
                        raise ChainBusy(
                            f"run {busy['run_id']} of this chain is {busy['state']}; "
                            f"wait for it to end or cancel it first"
                        )
                self.db.execute(
                    "INSERT INTO runs (run_id, created, updated, recipe, cluster, backend, state, resumed_from, chain)"
                    " VALUES (?, ?, ?, ?, ?, ?, 'SUBMITTING', ?, ?)",
                    (run_id, now, now, recipe, cluster, backend, resumed_from, chain or run_id),
                )
                self.db.execute("COMMIT")
                return self.get(run_id)
            except sqlite3.IntegrityError:
                self.db.execute("ROLLBACK")
                continue
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
        raise RuntimeError("could not allocate a run id")

    def update(self, run_id: str, **fields) -> Run:
        if not fields:
            return self.get(run_id)
        for key in ("job_ids", "info"):
            if key in fields:
                fields[key] = json.dumps(fields[key])
        fields["updated"] = time.time()
        cols = ", ".join(f"{k} = ?" for k in fields)
        self.db.execute(f"UPDATE runs SET {cols} WHERE run_id = ?", (*fields.values(), run_id))
        return self.get(run_id)

    def set_updated(self, run_id: str, when: float) -> None:
        """Set a run's last-update time (an import gives back the run's own, not the import's)."""
        self.db.execute("UPDATE runs SET updated = ? WHERE run_id = ?", (when, run_id))

    def delete(self, run_id: str) -> None:
        self.db.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))

    def prunable(self, older_than_s: float) -> list[Run]:
        """Finished runs not updated for older_than_s, oldest first (what prune would forget); a resume
        chain only whole: a run whose resumption is kept keeps its history for status and check."""
        cutoff = time.time() - older_than_s
        marks = ",".join("?" * len(TERMINAL))
        rows = self.db.execute(
            f"SELECT * FROM runs WHERE updated < ? AND state IN ({marks}) ORDER BY updated", (cutoff, *TERMINAL)
        ).fetchall()
        runs = [Run.from_row(r) for r in rows]
        ids = {r.run_id for r in runs}
        kept = {
            row["chain"]
            for row in self.db.execute("SELECT run_id, chain FROM runs WHERE chain IS NOT NULL").fetchall()
            if row["run_id"] not in ids
        }
        return [r for r in runs if not r.chain or r.chain not in kept]

    def prune(self, older_than_s: float, only: list[str] | None = None) -> list[str]:
        """Forget finished runs not updated for older_than_s (of `only`, when given: the ones a user
        was shown); returns their ids. A run that changed since is kept."""
        cutoff = time.time() - older_than_s
        marks = ",".join("?" * len(TERMINAL))
        where = f"updated < ? AND state IN ({marks})"
        ids = [r.run_id for r in self.prunable(older_than_s)]
        if only is not None:
            ids = [i for i in ids if i in set(only)]
        gone = []
        for run_id in ids:
            if self.db.execute(f"DELETE FROM runs WHERE run_id = ? AND {where}", (run_id, cutoff, *TERMINAL)).rowcount:
                gone.append(run_id)
        if gone:  # experiments forget the runs that are gone, and go when none is left
            self.db.execute("DELETE FROM experiment_runs WHERE run_id NOT IN (SELECT run_id FROM runs)")
            self.db.execute("DELETE FROM experiments WHERE name NOT IN (SELECT experiment FROM experiment_runs)")
        return gone

    def insert(self, record: dict) -> bool:
        """Register a run again from its record (import); False if its id is already known."""
        cols = (
            "run_id",
            "created",
            "updated",
            "recipe",
            "cluster",
            "backend",
            "state",
            "reason",
            "job_ids",
            "run_dir",
            "resumed_from",
            "chain",
            "info",
        )
        values = {"updated": time.time(), **record}
        values["job_ids"] = json.dumps(values.get("job_ids") or [])
        values["info"] = json.dumps(values.get("info") or {})
        values.setdefault("reason", "")
        values.setdefault("chain", values["run_id"])
        cur = self.db.execute(
            f"INSERT OR IGNORE INTO runs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
            tuple(values.get(c) for c in cols),
        )
        return bool(cur.rowcount)

    # -- reads --------------------------------------------------------------------------
    def chain(self, chain: str) -> list[Run]:
        rows = self.db.execute("SELECT * FROM runs WHERE chain = ? ORDER BY created", (chain,)).fetchall()
        return [Run.from_row(r) for r in rows]

    def get(self, run_id: str) -> Run | None:
        row = self.db.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return Run.from_row(row) if row else None

    def find(self, prefix: str) -> list[Run]:
        exact = self.get(prefix)
        if exact:
            return [exact]
        rows = self.db.execute(
            "SELECT * FROM runs WHERE run_id LIKE ? ESCAPE '\\' ORDER BY created DESC LIMIT 10",
            (prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%",),
        ).fetchall()
        return [Run.from_row(r) for r in rows]

    def recipes(self) -> set[str]:
        """The recipes the registry's runs ran."""
        return {r[0] for r in self.db.execute("SELECT DISTINCT recipe FROM runs")}

    def recent(self, limit: int | None = 50, *, state: str | None = None, recipe: str | None = None) -> list[Run]:
        sql, args = "SELECT * FROM runs", []
        where = []
        if state:
            where.append("state = ?")
            args.append(state)
        if recipe:
            where.append("recipe = ?")
            args.append(recipe)
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created DESC, run_id DESC"
        if limit:
            sql += f" LIMIT {int(limit)}"
        return [Run.from_row(r) for r in self.db.execute(sql, args).fetchall()]

    # -- experiments ----------------------------------------------------------------------
    def add_experiment(self, name: str, spec: dict) -> None:
        """Create an experiment. Its name must be new and no run's id: `status NAME` and `compare
        NAME` take either, so one name must mean one thing."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            self.check_new_name(name)
            self.db.execute(
                "INSERT INTO experiments (name, created, spec) VALUES (?, ?, ?)", (name, time.time(), json.dumps(spec))
            )
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise

    def check_new_name(self, name: str) -> None:
        """Refuse an experiment name that is taken: by an experiment, or by a run's id."""
        if self.db.execute("SELECT 1 FROM experiments WHERE name = ?", (name,)).fetchone():
            raise UsageError(f"experiment '{name}' already exists; choose another --experiment name")
        if self.get(name) is not None:
            raise UsageError(f"--experiment '{name}' is the id of a run; choose another --experiment name")

    def ensure_experiment(self, name: str, created: float) -> None:
        """An experiment that an import brings back, unless it is there (its spec is not kept)."""
        self.db.execute("INSERT OR IGNORE INTO experiments (name, created, spec) VALUES (?, ?, '{}')", (name, created))

    def add_to_experiment(self, name: str, run_id: str, position: int, label: str) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO experiment_runs (experiment, run_id, position, label) VALUES (?, ?, ?, ?)",
            (name, run_id, position, label),
        )

    def drop_experiment(self, name: str) -> None:
        self.db.execute("DELETE FROM experiment_runs WHERE experiment = ?", (name,))
        self.db.execute("DELETE FROM experiments WHERE name = ?", (name,))

    def experiment(self, name: str) -> dict | None:
        """{"name", "created", "spec", "runs": [(Run, label)] in submission order}, or None."""
        row = self.db.execute("SELECT * FROM experiments WHERE name = ?", (name,)).fetchone()
        if row is None:
            return None
        members = self.db.execute(
            "SELECT r.*, e.label AS _label FROM experiment_runs e JOIN runs r ON r.run_id = e.run_id "
            "WHERE e.experiment = ? ORDER BY e.position",
            (name,),
        ).fetchall()
        runs = []
        for m in members:
            d = dict(m)
            label = d.pop("_label")
            runs.append((Run.from_row(d), label))
        return {"name": row["name"], "created": row["created"], "spec": json.loads(row["spec"]), "runs": runs}

    def experiments(self, limit: int | None = 50) -> list[dict]:
        """[{"name", "created", "runs": n}] newest first."""
        sql = (
            "SELECT x.name, x.created, COUNT(e.run_id) AS n FROM experiments x "
            "LEFT JOIN experiment_runs e ON e.experiment = x.name GROUP BY x.name ORDER BY x.created DESC"
        )
        if limit:
            sql += f" LIMIT {int(limit)}"
        return [{"name": r[0], "created": r[1], "runs": r[2]} for r in self.db.execute(sql).fetchall()]

    def jobs_dir(self) -> Path:
        d = self.root / "jobs"
        d.mkdir(exist_ok=True)
        return d
