"""The SQLite schema of a study store. One file per study; every write is one transaction."""

SCHEMA_VERSION = 5

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- One server boot per row. role: baseline | candidate | baseline_check | finalist | baseline_final
CREATE TABLE IF NOT EXISTS trials (
    id                 INTEGER PRIMARY KEY,
    seq                INTEGER NOT NULL UNIQUE,
    role               TEXT NOT NULL,
    config_key         TEXT NOT NULL,
    config_json        TEXT NOT NULL,
    params_json        TEXT NOT NULL,
    status             TEXT NOT NULL,          -- running | done
    outcome            TEXT,                   -- Outcome value once done
    detail             TEXT,
    log_path           TEXT,
    log_tail           TEXT,
    boot_facts_json    TEXT,
    mismatches_json    TEXT,
    knobs_json         TEXT,                   -- each env knob: applied | not applied | unproven (engine.knobs)
    server_pid         INTEGER,
    server_pgid        INTEGER,
    server_create_time REAL,
    session_id         INTEGER,                -- the session (tuner process) running it; recovery spares live ones
    launch_token       TEXT,                   -- written before the spawn; in the server's env as SERVETUNE_TRIAL_TOKEN
    slot               INTEGER,                -- the slot that ran it (NULL: a store from before slots = slot 0)
    placement_json     TEXT,                   -- that slot's GPUs/CPUs (engine.placement); not part of the config key
    earlier_boots      INTEGER,                -- healthy boots before the current one (a trial reopened after a kill)
    earlier_boot_s     REAL,                   -- and their launch-to-healthy seconds, for the study's cost
    cache_json         TEXT,                   -- the boot's cache root, cold/warm, compile time (engine.cache)
    exclusion_json     TEXT,                   -- why this boot is kept out of the verdict (analysis.outliers)
    machine_json       TEXT,                   -- the slot's GPUs / CPU before the boot (machine.MachineRecord)
    stopped_early      TEXT,                   -- why it stopped measuring before its replicates were done (tune.racing)
    started_at         REAL NOT NULL,
    healthy_at         REAL,
    ended_at           REAL
);
CREATE INDEX IF NOT EXISTS trials_by_key ON trials(config_key);

-- One scenario measured once on one server.
CREATE TABLE IF NOT EXISTS runs (
    id                 INTEGER PRIMARY KEY,
    trial_id           INTEGER NOT NULL REFERENCES trials(id),
    scenario           TEXT NOT NULL,
    replicate          INTEGER NOT NULL,
    attempt            INTEGER NOT NULL DEFAULT 1,   -- > 1: an earlier attempt was rejected (client_bound)
    outcome            TEXT NOT NULL,
    summary_json       TEXT NOT NULL,
    server_stats_json  TEXT NOT NULL,
    client_health_json TEXT NOT NULL,
    records_path       TEXT,
    error              TEXT,
    machine_samples_json TEXT,                   -- the machine through the run (machine.RunMachine)
    started_at         REAL NOT NULL,
    ended_at           REAL NOT NULL,
    UNIQUE (trial_id, scenario, replicate, attempt)
);

-- Wall-clock accounting across sessions of the same study (a resumed study adds a session).
CREATE TABLE IF NOT EXISTS sessions (
    id         INTEGER PRIMARY KEY,
    started_at REAL NOT NULL,
    last_seen  REAL NOT NULL,
    ended_at   REAL,
    end_reason TEXT,
    pid        INTEGER,   -- the tuner process: with host and pid_create_time, tells a live owner from a dead one
    host       TEXT,
    pid_create_time REAL
);
"""

# Columns added after version 1, in order: (version it came with, table, column definition).
# A store of an older version gets them on open; their NULLs read as "unknown" (see recovery).
ADDED_COLUMNS = (
    (2, "trials", "session_id INTEGER"),
    (2, "trials", "launch_token TEXT"),
    (2, "sessions", "pid INTEGER"),
    (2, "sessions", "host TEXT"),
    (2, "sessions", "pid_create_time REAL"),
    (3, "trials", "slot INTEGER"),
    (3, "trials", "placement_json TEXT"),
    (4, "trials", "earlier_boots INTEGER"),
    (4, "trials", "earlier_boot_s REAL"),
    (5, "trials", "knobs_json TEXT"),
    (5, "trials", "cache_json TEXT"),
    (5, "trials", "exclusion_json TEXT"),
    (5, "trials", "machine_json TEXT"),
    (5, "trials", "stopped_early TEXT"),
    (5, "runs", "machine_samples_json TEXT"),
)


def missing_columns_sql(present: dict[str, set[str]]) -> list[str]:
    """ALTER TABLE statements for every added column a store's tables lack (`present`: table ->
    its columns): a store of an older version, or one of this version written before a column of
    this version was added."""
    return [f"ALTER TABLE {table} ADD COLUMN {column}" for _, table, column in ADDED_COLUMNS
            if column.split()[0] not in present.get(table, set())]
