-- The log table, partitioned by day on ts so that retention drops whole partitions (and their
-- indexes) instead of deleting rows. See the README ("Indexes", "Retention").
--
-- PostgreSQL 15 does not allow identity columns on partitioned tables, so ids come from a plain
-- sequence. CACHE 1000 lets each writer connection take ids without touching the sequence for
-- every row; the price is that ids are not commit-ordered across connections (readers know).
CREATE SEQUENCE logs_id_seq AS bigint CACHE 1000;

CREATE TABLE logs (
    id          bigint      NOT NULL DEFAULT nextval('logs_id_seq'),
    tenant      text        NOT NULL,
    ts          timestamptz NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    severity    smallint    NOT NULL,
    service     text        NOT NULL,
    message     text        NOT NULL,
    attributes  jsonb       NOT NULL DEFAULT '{}'::jsonb,
    trace_id    text,
    span_id     text
) PARTITION BY RANGE (ts);

ALTER SEQUENCE logs_id_seq OWNED BY logs.id;

-- Daily partitions (logs_pYYYYMMDD) are created ahead of time by the service. A row whose day has
-- no partition (retention off and a very old timestamp, or a clock far off) lands here instead of
-- being refused; retention deletes old rows from it in small chunks.
CREATE TABLE logs_default PARTITION OF logs DEFAULT;

-- Rows arrive roughly in time order, so a BRIN on ts is tiny and nearly free to maintain, and it
-- prunes time-range scans to the blocks that can match. Indexes on the parent are created on
-- every partition.
--
-- A BRIN range filled by inserts is not summarized until a vacuum, and an unsummarized range
-- matches every query: before any vacuum, "the newest 100" read the whole day (measured: 390 ms
-- instead of 2 ms). autosummarize asks autovacuum to summarize each range as soon as it fills.
CREATE INDEX logs_ts_brin ON logs USING brin (ts) WITH (autosummarize = on);
-- received_at follows the physical order exactly; Tail polls by it. Also nearly free.
CREATE INDEX logs_received_at_brin ON logs USING brin (received_at) WITH (autosummarize = on);
