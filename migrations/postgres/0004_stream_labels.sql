-- A record's stream labels apart from its structured metadata: a Loki stream's labels (`job`,
-- `env`, `level` as sent) or an OpenTelemetry resource's attributes go to `labels`, what belongs
-- to one record alone stays in `attributes`. A stream selector matches `labels` only, as Loki's
-- does. Rows stored before this migration have every label in `attributes`.
ALTER TABLE logs ADD COLUMN labels jsonb NOT NULL DEFAULT '{}'::jsonb;

-- The rollup keeps the stream's `level` label as sent ('' without one) beside the severity, so
-- that `{level="WARNING"}` and `sum by (level)` read what the streams said.
ALTER TABLE log_volume ADD COLUMN level text NOT NULL DEFAULT '';
ALTER TABLE log_volume DROP CONSTRAINT log_volume_pkey;
ALTER TABLE log_volume ADD PRIMARY KEY (tenant, minute, service, severity, level, writer);
