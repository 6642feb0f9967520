-- The log table. Times are microseconds since the Unix epoch (UTC); attributes are a JSON object.
CREATE TABLE logs (
    -- AUTOINCREMENT: ids are never reused, even after retention deletes the newest rows, so a
    -- tail can follow them (with one writer they are assigned in commit order).
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant      TEXT    NOT NULL,
    ts          INTEGER NOT NULL,
    received_at INTEGER NOT NULL,
    severity    INTEGER NOT NULL,
    service     TEXT    NOT NULL,
    message     TEXT    NOT NULL,
    attributes  TEXT    NOT NULL DEFAULT '{}',
    trace_id    TEXT,
    span_id     TEXT
);

-- Reads are "a tenant's logs in a time range, newest first"; one index serves them and the
-- retention delete by time.
CREATE INDEX logs_tenant_ts ON logs (tenant, ts);
