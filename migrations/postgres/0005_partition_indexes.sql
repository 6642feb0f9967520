-- The BRIN indexes move from the partitioned `logs` to each partition of its own, so that a
-- partition can be of another access method: a sealed hour is a columnar table, and columnar
-- tables take no BRIN index (they keep a minimum and maximum of every column per chunk instead).
-- New partitions get theirs when they are created. Building a BRIN index reads its partition
-- once; on a large database this migration takes about as long as reading the log table.
DO $$
DECLARE
    part regclass;
BEGIN
    FOR part IN
        SELECT i.inhrelid::regclass FROM pg_inherits i WHERE i.inhparent = 'logs'::regclass
    LOOP
        EXECUTE format(
            'CREATE INDEX %I ON %s USING brin (ts) WITH (autosummarize = on)',
            part::text || '_ts', part);
        EXECUTE format(
            'CREATE INDEX %I ON %s USING brin (received_at) WITH (autosummarize = on)',
            part::text || '_received_at', part);
    END LOOP;
END
$$;

DROP INDEX logs_ts_brin;
DROP INDEX logs_received_at_brin;
