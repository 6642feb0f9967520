-- When each row of the volume rollup last received records (the inserting transaction's start,
-- as `logs.received_at`), so that a tail poll learns which minutes of `ts` received rows since
-- its last poll and scans only their partitions instead of every one.
ALTER TABLE log_volume ADD COLUMN received_at timestamptz NOT NULL DEFAULT now();
CREATE INDEX log_volume_received_at ON log_volume (tenant, received_at);
