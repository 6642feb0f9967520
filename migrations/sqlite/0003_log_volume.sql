-- Per minute (seconds since the Unix epoch, a multiple of 60), per tenant, service and severity:
-- how many records were stored and how many bytes of message, kept as batches are written (in
-- the batch's transaction) so that volume queries read a few rows per minute instead of the logs.
CREATE TABLE log_volume (
    tenant   TEXT    NOT NULL,
    minute   INTEGER NOT NULL,
    service  TEXT    NOT NULL,
    severity INTEGER NOT NULL,
    records  INTEGER NOT NULL,
    bytes    INTEGER NOT NULL,
    PRIMARY KEY (tenant, minute, service, severity)
);
