-- Trace and span ids are stored as their 16 and 8 bytes (trace_id_bytes, span_id_bytes) instead
-- of 32 and 16 hex characters: less to write per row, and random bytes are what a compressor
-- cannot shrink, so their hex doubled every id on disk in sealed hours too.
--
-- A database that holds rows keeps the text columns, for two reasons: changing their type would
-- rewrite every partition under a lock that stops ingest for as long as that takes, and servers
-- of the previous version, still running during a rolling upgrade, keep writing them. Reads take
-- an id from whichever column holds it, until retention drops the rows written before. A new
-- database has no rows and drops them.
--
-- One statement per EXECUTE: Citus sends a DDL statement's whole query string on to the shards,
-- and a string of several statements is refused there.
DO $$
BEGIN
    EXECUTE 'ALTER TABLE logs ADD COLUMN trace_id_bytes bytea, ADD COLUMN span_id_bytes bytea';
    IF NOT EXISTS (SELECT 1 FROM logs) THEN
        EXECUTE 'ALTER TABLE logs DROP COLUMN trace_id, DROP COLUMN span_id';
    END IF;
END
$$;
