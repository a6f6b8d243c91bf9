"""StudyStore: the SQLite file that holds everything a study measured.

Every write is a single transaction (WAL, synchronous=FULL), so a SIGKILL at any moment
leaves either the whole run/trial row or none of it. A trial row is written as `running`
before its server starts, with a launch token that goes into the server's environment (and the
server's pid and create time as soon as they exist), so a resumed study can find and stop a server
its killed predecessor left behind. Each trial names the session (tuner process) that runs it, so
recovery never takes a live tuner's trial for abandoned.

Readers get `Trial` records (store.model) with their runs, read in one pass and cached: the cache
is dropped on every write through this store and whenever SQLite's data_version says another
connection committed, so analysis after every replicate costs no query per trial.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from ..engine.applied import AppliedMismatch
from ..engine.bootfacts import BootFacts
from ..engine.cache import CacheRecord
from ..engine.config import Config
from ..engine.knobs import KnobEvidence
from ..engine.placement import Placement
from ..engine.provenance import ImageRef
from ..errors import ServetuneError
from ..load.records import RunResult, RunSummary
from ..machine import MachineRecord, RunMachine
from ..vocabulary import Outcome
from . import meta
from .model import Exclusion, Run, Trial, TrialRole, TrialState
from .schema import SCHEMA, SCHEMA_VERSION, missing_columns_sql

_M = TypeVar("_M", MachineRecord, RunMachine)


@dataclass
class SessionInfo:
    id: int
    started_at: float
    last_seen: float
    ended_at: float | None = None
    end_reason: str | None = None
    pid: int | None = None  # the tuner process that ran the session (None: older store)
    host: str | None = None
    pid_create_time: float | None = None

    def ran_after(self, at: float) -> float:
        """Seconds this session ran after `at` (a killed session up to its last heartbeat)."""
        end = self.ended_at if self.ended_at is not None else self.last_seen
        return max(0.0, end - max(self.started_at, at))


class StudyStore:
    FILENAME = "study.sqlite"

    def __init__(self, path: Path, *, read_only: bool = False):
        self.path = Path(path)
        # Masks secret values in server-log text before it is stored (the runner sets the engine's).
        self.redact: Callable[[str], str] = str
        self.read_only = read_only
        self._cached: tuple[int, tuple[Trial, ...]] | None = None  # (data_version, trials with runs)
        try:
            self._conn = _connect(self.path, read_only)
            _check_is_study_store(self._conn, self.path, fresh_ok=not read_only)
            if read_only:
                self._check_version(self.get_meta("schema_version"))
        except sqlite3.DatabaseError as exc:
            raise ServetuneError(f"{self.path}: not a usable study store ({exc})") from None
        if read_only:
            return
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.execute("PRAGMA foreign_keys=ON")
        self._conn.executescript(SCHEMA)
        version = self.get_meta("schema_version")
        if version is None:
            self.set_meta("schema_version", str(SCHEMA_VERSION))
        else:
            self._check_version(version)
            missing = missing_columns_sql(self._columns())
            if int(version) < SCHEMA_VERSION or missing:
                self._migrate(missing)

    def _check_version(self, version: str | None) -> None:
        """Older versions are read as they are (read-only) or migrated; newer ones are refused."""
        if version is None or not version.isdigit():
            raise ServetuneError(f"{self.path}: not a servetune study (no schema version in its meta table)")
        if int(version) > SCHEMA_VERSION:
            raise ServetuneError(f"{self.path}: store schema version {version}, this servetune reads {SCHEMA_VERSION}")

    def _columns(self) -> dict[str, set[str]]:
        return {table: {row[1] for row in self._conn.execute(f"PRAGMA table_info({table})")}
                for table in ("trials", "runs", "sessions")}

    def _migrate(self, statements: list[str]) -> None:
        """Bring an older store up to date in one transaction (a kill leaves it old, never half-new)."""
        with self._conn:
            self._conn.execute("BEGIN IMMEDIATE")
            for statement in statements:
                self._conn.execute(statement)
            self._conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))

    @classmethod
    def in_dir(cls, out_dir: Path) -> StudyStore:
        out_dir.mkdir(parents=True, exist_ok=True)
        return cls(out_dir / cls.FILENAME)

    @classmethod
    def open_existing(cls, out_dir: Path, *, read_only: bool = False) -> StudyStore:
        """The store of a study directory; `read_only` for commands that only look (status, report,
        compare): they must not create tables in, or otherwise change, a file they were pointed at."""
        path = Path(out_dir) / cls.FILENAME
        if not path.is_file():
            raise ServetuneError(f"{out_dir}: no study store here (expected {path})")
        return cls(path, read_only=read_only)

    def close(self) -> None:
        self._conn.close()

    # --- transactions -------------------------------------------------------------------

    def _write(self, sql: str, args: tuple[Any, ...]) -> sqlite3.Cursor:
        self._cached = None
        with self._conn:  # BEGIN ... COMMIT, ROLLBACK on error
            self._conn.execute("BEGIN IMMEDIATE")
            return self._conn.execute(sql, args)

    def _study(self) -> tuple[Trial, ...]:
        """Every trial with its runs: two SELECTs in one read transaction, then cached until a write."""
        # data_version changes when another connection commits (a second process on the file).
        version = self._conn.execute("PRAGMA data_version").fetchone()[0]
        if self._cached is not None and self._cached[0] == version:
            return self._cached[1]
        with self._conn:
            self._conn.execute("BEGIN")
            trial_rows = self._conn.execute("SELECT * FROM trials ORDER BY seq").fetchall()
            run_rows = self._conn.execute("SELECT * FROM runs ORDER BY id").fetchall()
        runs: dict[int, list[Run]] = {}
        for row in run_rows:
            runs.setdefault(row["trial_id"], []).append(self._parsed("runs", row, _run))
        trials = tuple(self._parsed("trials", row, lambda r: _trial(r, tuple(runs.get(r["id"], ()))))
                       for row in trial_rows)
        self._cached = (version, trials)
        return trials

    def _parsed(self, table: str, row: sqlite3.Row, parse: Callable[[sqlite3.Row], Any]) -> Any:
        """A row as its object; a row damaged by hand or by another program (bad JSON, an outcome
        or role this version does not know) is one line naming the store, table and row."""
        try:
            return parse(row)
        except (ValueError, KeyError, TypeError) as exc:  # json, enum and pydantic errors are ValueErrors
            what = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ServetuneError(f"{self.path}: {table} row id {row['id']} is unreadable: {what}") from None

    # --- meta ---------------------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else row["value"]

    def set_meta(self, key: str, value: str) -> None:
        self._write("INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                    (key, value))

    def delete_meta(self, *keys: str) -> None:
        for key in keys:
            self._write("DELETE FROM meta WHERE key = ?", (key,))

    def get_meta_json(self, key: str) -> Any:
        raw = self.get_meta(key)
        try:
            return None if raw is None else json.loads(raw)
        except ValueError as exc:
            raise ServetuneError(f"{self.path}: meta {key!r} is not JSON: {exc}") from None

    def set_meta_json(self, key: str, value: Any) -> None:
        self.set_meta(key, json.dumps(value, sort_keys=True))

    def spec_doc(self) -> dict[str, Any] | None:
        """The study spec as the tuner dumped it (StudySpec.from_store reads it); None when none is
        stored (or what is stored is not a JSON object)."""
        doc = self.get_meta_json(meta.SPEC)
        return doc if isinstance(doc, dict) else None

    def set_spec_doc(self, doc: dict[str, Any]) -> None:
        self.set_meta_json(meta.SPEC, doc)

    def final_plan(self) -> list[meta.PlannedTrial] | None:
        """The validation boots planned when the search ended; None while it goes on."""
        return meta.final_plan_from_json(self.get_meta_json(meta.FINAL_PLAN))

    def set_final_plan(self, plan: list[meta.PlannedTrial]) -> None:
        self.set_meta_json(meta.FINAL_PLAN, [[step.role.value, step.config_key] for step in plan])

    def eta_log(self) -> list[meta.EtaEntry]:
        """The ETA shown before each boot, oldest first; ValueError when an entry is unreadable."""
        return [meta.EtaEntry.from_json(e) for e in self.get_meta_json(meta.ETA_LOG) or []]

    def log_eta(self, entry: meta.EtaEntry) -> None:
        self.set_meta_json(meta.ETA_LOG, [*(self.get_meta_json(meta.ETA_LOG) or []), entry.to_json()])

    def verdict(self) -> meta.Verdict | None:
        """The verdict of the last run that finished or stopped unpaused; None before one."""
        return meta.verdict_from_json(self.get_meta_json(meta.VERDICT))

    def set_verdict(self, verdict: meta.Verdict) -> None:
        self.set_meta_json(meta.VERDICT, verdict.to_json())

    def engine_images(self) -> list[ImageRef]:
        """The docker images of the study's starts, oldest first (tune/provenance.py records them)."""
        return meta.images_from_json(self.get_meta_json(meta.ENGINE_IMAGES))

    def bandwidth(self) -> dict[str, Any] | None:
        """The memory bandwidth measured at the study's start, or why it was not; None: never asked."""
        value = self.get_meta_json(meta.BANDWIDTH)
        return value if isinstance(value, dict) else None

    def revalidation_cap(self) -> int | None:
        """The most boots re-validation may give the leading finalist, as fixed when the study
        started; None for a study that began before re-validation until decided existed."""
        doc = self.get_meta_json(meta.REVALIDATION)
        return int(doc["max_boots"]) if isinstance(doc, dict) and "max_boots" in doc else None

    def set_revalidation_cap(self, max_boots: int) -> None:
        self.set_meta_json(meta.REVALIDATION, {"max_boots": max_boots})

    def search_stop(self) -> meta.SearchStop | None:
        """Why the search ended by its stopping rule; None while it has not (or has no rule)."""
        return meta.search_stop_from_json(self.get_meta_json(meta.SEARCH_STOP))

    def set_search_stop(self, stop: meta.SearchStop) -> None:
        self.set_meta_json(meta.SEARCH_STOP, stop.to_json())

    # --- trials -------------------------------------------------------------------------

    def begin_trial(self, role: TrialRole, config: Config, params: dict[str, Any], *,
                    session_id: int | None = None, slot: int = 0,
                    placement: Placement | None = None, cache: CacheRecord | None = None) -> Trial:
        """A trial `running` from now; `cache` what is asked of its cache before it boots (a wipe,
        for the excluded boot it replaces)."""
        now = time.time()
        self._cached = None
        with self._conn:
            self._conn.execute("BEGIN IMMEDIATE")
            seq = self._conn.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM trials").fetchone()[0]
            cur = self._conn.execute(
                "INSERT INTO trials(seq, role, config_key, config_json, params_json, status, started_at, session_id,"
                " slot, placement_json, cache_json) VALUES (?, ?, ?, ?, ?, 'running', ?, ?, ?, ?, ?)",
                (seq, role.value, config.key(), config.canonical_json(), json.dumps(params, sort_keys=True),
                 now, session_id, slot, _dumps_placement(placement),
                 None if cache is None else cache.model_dump_json()),
            )
        return self.trial(_inserted_id(cur))

    def record_launch(self, trial_id: int, *, launch_token: str, log_path: str) -> None:
        """The intent to spawn a server, written before the spawn: a tuner killed before it could
        record the pid leaves a token that recovery finds in the server's environment."""
        self._write("UPDATE trials SET launch_token = ?, log_path = ? WHERE id = ?", (launch_token, log_path, trial_id))

    def record_machine(self, trial_id: int, record: MachineRecord) -> None:
        """The slot's machine as found before the (current) boot."""
        self._write("UPDATE trials SET machine_json = ? WHERE id = ?", (record.model_dump_json(), trial_id))

    def record_server(self, trial_id: int, *, pid: int, pgid: int, create_time: float, log_path: str) -> None:
        self._write("UPDATE trials SET server_pid = ?, server_pgid = ?, server_create_time = ?, log_path = ?"
                    " WHERE id = ?", (pid, pgid, create_time, log_path, trial_id))

    def record_boot(self, trial_id: int, *, healthy_at: float | None,
                    boot_facts: BootFacts | None,
                    mismatches: list[AppliedMismatch], log_path: str | None,
                    knobs: Sequence[KnobEvidence] = (), cache: CacheRecord | None = None) -> None:
        facts_json = None if boot_facts is None else boot_facts.model_dump(mode="json")
        self._write("UPDATE trials SET healthy_at = ?, boot_facts_json = ?, mismatches_json = ?, knobs_json = ?,"
                    " log_path = COALESCE(?, log_path), cache_json = COALESCE(?, cache_json) WHERE id = ?",
                    (healthy_at, _dumps(facts_json), json.dumps([m.model_dump(mode="json") for m in mismatches]),
                     json.dumps([k.model_dump(mode="json") for k in knobs]), log_path,
                     None if cache is None else cache.model_dump_json(), trial_id))

    def exclude_trial(self, trial_id: int, exclusion: Exclusion) -> None:
        """Keep a boot out of the verdict from now on, with why (its runs stay stored)."""
        self._write("UPDATE trials SET exclusion_json = ? WHERE id = ?", (json.dumps(exclusion.to_json()), trial_id))

    def stop_early(self, trial_id: int, why: str) -> None:
        """The trial measures no more replicates (tune/racing.py); kept so a resumed study keeps the stop."""
        self._write("UPDATE trials SET stopped_early = ? WHERE id = ?", (why, trial_id))

    def finish_trial(self, trial_id: int, outcome: Outcome, *, detail: str | None = None,
                     log_tail: str | None = None) -> None:
        detail, log_tail = (None if x is None else self.redact(x) for x in (detail, log_tail))
        self._write("UPDATE trials SET status = 'done', outcome = ?, detail = ?, log_tail = COALESCE(?, log_tail),"
                    " ended_at = ? WHERE id = ?", (outcome.value, detail, log_tail, time.time(), trial_id))

    def reopen_trial(self, trial_id: int, *, session_id: int | None = None) -> None:
        """A trial interrupted by a kill: keep its runs, clear the dead server, boot it again
        (owned by `session_id` from now on). A boot that became healthy is kept in the counts the
        study's cost reads (SET reads the row as it was)."""
        self._write("UPDATE trials SET status = 'running', server_pid = NULL, server_pgid = NULL,"
                    " server_create_time = NULL, launch_token = NULL,"
                    " earlier_boots = COALESCE(earlier_boots, 0) + (healthy_at IS NOT NULL),"
                    " earlier_boot_s = COALESCE(earlier_boot_s, 0) + COALESCE(healthy_at - started_at, 0),"
                    " started_at = ?, healthy_at = NULL, session_id = ? WHERE id = ?",
                    (time.time(), session_id, trial_id))

    def move_trial(self, trial_id: int, *, slot: int, placement: Placement | None) -> None:
        """A reopened trial runs on `slot` (its own, or another when the study has fewer now)."""
        self._write("UPDATE trials SET slot = ?, placement_json = ? WHERE id = ?",
                    (slot, _dumps_placement(placement), trial_id))

    def trial(self, trial_id: int) -> Trial:
        found = next((t for t in self._study() if t.id == trial_id), None)
        if found is None:
            raise KeyError(trial_id)
        return found

    def trials(self, role: TrialRole | None = None) -> list[Trial]:
        """Trials in the order they started, each with its runs (`role`: only those)."""
        return [t for t in self._study() if role is None or t.role == role]

    def unfinished_trials(self) -> list[Trial]:
        return [t for t in self._study() if t.state is not TrialState.done]

    # --- runs ---------------------------------------------------------------------------

    def record_run(self, trial_id: int, replicate: int, result: RunResult, *, started_at: float,
                   ended_at: float, attempt: int = 1, machine: RunMachine | None = None) -> None:
        self._write(
            "INSERT INTO runs(trial_id, scenario, replicate, attempt, outcome, summary_json, server_stats_json,"
            " client_health_json, records_path, error, started_at, ended_at, machine_samples_json)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (trial_id, result.scenario, replicate, attempt, str(result.outcome), json.dumps(result.summary.to_dict()),
             json.dumps(result.server_stats), json.dumps(result.client_health), result.records_path,
             result.error, started_at, ended_at, None if machine is None else machine.model_dump_json()),
        )

    def runs(self, trial_id: int | None = None) -> list[Run]:
        """Runs in the order they were recorded: all of them, or one trial's."""
        if trial_id is None:
            return sorted((r for t in self._study() for r in t.runs), key=lambda r: r.id)
        return list(next((t.runs for t in self._study() if t.id == trial_id), ()))

    # --- sessions (wall-clock budget across resumes) -------------------------------------

    def begin_session(self, *, pid: int | None = None, host: str | None = None,
                      pid_create_time: float | None = None) -> int:
        """A tuner process starts working on the study; pid, host and the pid's create time let
        a later process tell whether this one is still alive."""
        now = time.time()
        cur = self._write("INSERT INTO sessions(started_at, last_seen, pid, host, pid_create_time)"
                          " VALUES (?, ?, ?, ?, ?)", (now, now, pid, host, pid_create_time))
        return _inserted_id(cur)

    def heartbeat(self, session_id: int) -> None:
        self._write("UPDATE sessions SET last_seen = ? WHERE id = ?", (time.time(), session_id))

    def end_session(self, session_id: int, reason: str) -> None:
        now = time.time()
        self._write("UPDATE sessions SET last_seen = ?, ended_at = ?, end_reason = ? WHERE id = ?",
                    (now, now, reason, session_id))

    def sessions(self) -> list[SessionInfo]:
        rows = self._conn.execute("SELECT * FROM sessions ORDER BY id").fetchall()
        return [_session(r) for r in rows]

    def session(self, session_id: int) -> SessionInfo | None:
        row = self._conn.execute("SELECT * FROM sessions WHERE id = ?", (session_id,)).fetchone()
        return None if row is None else _session(row)

    def elapsed_wall_s(self) -> float:
        """Wall time spent by all sessions so far (a killed session counts up to its last heartbeat)."""
        return sum(s.ran_after(s.started_at) for s in self.sessions())


def _connect(path: Path, read_only: bool) -> sqlite3.Connection:
    if read_only:
        # mode=ro: SQLite itself refuses every write, so looking cannot change the file.
        conn = sqlite3.connect(f"file:{quote(str(path.absolute()))}?mode=ro", uri=True, isolation_level=None,
                               timeout=30)
    else:
        conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    conn.row_factory = sqlite3.Row
    return conn


def _check_is_study_store(conn: sqlite3.Connection, path: Path, *, fresh_ok: bool) -> None:
    """Refuse a file that is not SQLite, is damaged, or belongs to another program.

    quick_check reads every page, so a truncated or corrupt store is found here, with its path,
    rather than as a traceback in the middle of a command; the stores are small (requests live
    in JSONL files beside them). An empty database is a fresh store only for the tuner."""
    problem = conn.execute("PRAGMA quick_check").fetchone()[0]
    if problem != "ok":
        raise ServetuneError(f"{path}: the study store is damaged (SQLite quick_check: {problem})")
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if {"meta", "trials"} <= tables or (fresh_ok and not tables):
        return
    raise ServetuneError(f"{path}: not a servetune study (an SQLite file without servetune's tables)")


def _inserted_id(cur: sqlite3.Cursor) -> int:
    """The id of the row an INSERT just wrote (typeshed types lastrowid as optional: None before any insert)."""
    if cur.lastrowid is None:
        raise RuntimeError("INSERT without a row id")
    return cur.lastrowid


def _dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(value)


def _dumps_placement(placement: Placement | None) -> str | None:
    return None if placement is None else _dumps(placement.describe())


def _loads_placement(raw: str | None) -> Placement | None:
    described = _loads(raw)
    return None if described is None else Placement.from_described(described)


def _loads(raw: str | None, default: Any = None) -> Any:
    return default if raw is None else json.loads(raw)


def _object(raw: str | None) -> dict[str, Any]:
    """A column that holds a JSON object (a dict to every reader); anything else is a damaged row."""
    return _dict(json.loads(raw) if raw is not None else None)


def _dict(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, found {type(value).__name__}")
    return value


def _trial(row: sqlite3.Row, runs: tuple[Run, ...]) -> Trial:
    config_data = _object(row["config_json"])
    facts = _loads(row["boot_facts_json"])
    return Trial(
        id=row["id"], seq=row["seq"], role=TrialRole(row["role"]),
        config=Config(flags=_dict(config_data["flags"]), env=_dict(config_data["env"]),
                      engine=config_data.get("engine")),  # another engine section's, in an engine comparison
        params=_object(row["params_json"]), state=TrialState(row["status"]),
        outcome=None if row["outcome"] is None else Outcome(row["outcome"]),
        detail=row["detail"], log_path=row["log_path"], log_tail=row["log_tail"],
        boot_facts=BootFacts.model_validate(facts) if facts else None,
        mismatches=[AppliedMismatch.model_validate(m) for m in _loads(row["mismatches_json"], [])],
        server_pid=row["server_pid"], server_pgid=row["server_pgid"],
        server_create_time=row["server_create_time"], started_at=row["started_at"],
        healthy_at=row["healthy_at"], ended_at=row["ended_at"],
        session_id=_optional(row, "session_id"), launch_token=_optional(row, "launch_token"),
        runs=runs, slot=_optional(row, "slot") or 0, placement=_loads_placement(_optional(row, "placement_json")),
        earlier_boots=_optional(row, "earlier_boots") or 0, earlier_boot_s=_optional(row, "earlier_boot_s") or 0.0,
        knobs=tuple(KnobEvidence.model_validate(k) for k in _loads(_optional(row, "knobs_json"), [])),
        cache=_cache(_optional(row, "cache_json")), exclusion=_exclusion(_optional(row, "exclusion_json")),
        machine=_machine(MachineRecord, _optional(row, "machine_json")),
        stopped_early=_optional(row, "stopped_early"),
    )


def _cache(raw: str | None) -> CacheRecord | None:
    return None if raw is None else CacheRecord.model_validate_json(raw)


def _exclusion(raw: str | None) -> Exclusion | None:
    return None if raw is None else Exclusion.from_json(_object(raw))


def _session(row: sqlite3.Row) -> SessionInfo:
    return SessionInfo(row["id"], row["started_at"], row["last_seen"], row["ended_at"], row["end_reason"],
                       pid=_optional(row, "pid"), host=_optional(row, "host"),
                       pid_create_time=_optional(row, "pid_create_time"))


def _optional(row: sqlite3.Row, column: str) -> Any:
    """A column added by a later schema version: None where a store was opened without migrating."""
    return row[column] if column in row.keys() else None  # noqa: SIM118 (sqlite3.Row has no __contains__ by name)


def _run(row: sqlite3.Row) -> Run:
    return Run(
        id=row["id"], trial_id=row["trial_id"], scenario=row["scenario"], replicate=row["replicate"],
        attempt=row["attempt"], outcome=Outcome(row["outcome"]),
        summary=RunSummary.model_validate(json.loads(row["summary_json"])),
        server_stats=_object(row["server_stats_json"]), client_health=_object(row["client_health_json"]),
        records_path=row["records_path"], error=row["error"], started_at=row["started_at"],
        ended_at=row["ended_at"], machine=_machine(RunMachine, _optional(row, "machine_samples_json")),
    )


def _machine(kind: type[_M], raw: str | None) -> _M | None:
    return None if raw is None else kind.model_validate_json(raw)
