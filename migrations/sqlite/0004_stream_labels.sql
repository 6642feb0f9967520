-- A record's stream labels apart from its structured metadata: a Loki stream's labels (`job`,
-- `env`, `level` as sent) or an OpenTelemetry resource's attributes go to `labels`, what belongs
-- to one record alone stays in `attributes`. A stream selector matches `labels` only, as Loki's
-- does. Rows stored before this migration have every label in `attributes`.
ALTER TABLE logs ADD COLUMN labels TEXT NOT NULL DEFAULT '{}';

-- The rollup keeps the stream's `level` label as sent ('' without one) beside the severity, so
-- that `{level="WARNING"}` and `sum by (level)` read what the streams said. SQLite cannot change
-- a primary key in place: the table is rebuilt.
CREATE TABLE log_volume_new (
    tenant   TEXT    NOT NULL,
    minute   INTEGER NOT NULL,
    service  TEXT    NOT NULL,
    severity INTEGER NOT NULL,
    level    TEXT    NOT NULL DEFAULT '',
    records  INTEGER NOT NULL,
    bytes    INTEGER NOT NULL,
    PRIMARY KEY (tenant, minute, service, severity, level)
);
INSERT INTO log_volume_new (tenant, minute, service, severity, level, records, bytes)
    SELECT tenant, minute, service, severity, '', records, bytes FROM log_volume;
DROP TABLE log_volume;
ALTER TABLE log_volume_new RENAME TO log_volume;
