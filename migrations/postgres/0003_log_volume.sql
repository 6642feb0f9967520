-- Per minute, per tenant, service and severity: how many records were stored and how many bytes
-- of message, kept as batches are written (in the batch's transaction) so that volume queries
-- and histograms read a few rows per minute instead of scanning the logs.
--
-- writer is the writing session (its backend pid): each session adds to rows of its own, so
-- concurrent batches never wait on one another's row locks. Readers sum over writers.
CREATE TABLE log_volume (
    tenant   text        NOT NULL,
    minute   timestamptz NOT NULL,
    service  text        NOT NULL,
    severity smallint    NOT NULL,
    writer   integer     NOT NULL,
    records  bigint      NOT NULL,
    bytes    bigint      NOT NULL,
    PRIMARY KEY (tenant, minute, service, severity, writer)
);
