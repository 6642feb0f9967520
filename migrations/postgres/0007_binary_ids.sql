-- Trace and span ids are stored as their 16 and 8 bytes instead of 32 and 16 hex characters:
-- less to write per row, and random bytes are what a compressor cannot shrink, so their hex
-- doubled every id on disk in sealed hours too.
--
-- Changing the columns' type would rewrite every partition under a lock that stops ingest for
-- as long as that takes. Renaming and adding columns changes only the catalog: rows written
-- before keep their ids as text under the old columns' new names, where reads still find them,
-- until retention drops their partitions.
--
-- One statement each through EXECUTE: Citus sends a DDL statement's whole query string on to
-- the shards, and a string of several statements is refused there.
DO $$
BEGIN
    EXECUTE 'ALTER TABLE logs RENAME COLUMN trace_id TO trace_id_hex';
    EXECUTE 'ALTER TABLE logs RENAME COLUMN span_id TO span_id_hex';
    EXECUTE 'ALTER TABLE logs ADD COLUMN trace_id bytea, ADD COLUMN span_id bytea';
END
$$;
