-- Chunks stored under a producer id and sequence number, so a retried chunk is stored once.
-- A key is claimed in the same transaction that inserts the chunk's records: it exists iff they
-- were committed. Concurrent claims of one key (two shards, two replicas) are serialized by the
-- primary key: the second waits for the first to commit or roll back. Keys older than the dedup
-- window are deleted by the retention task.
CREATE TABLE producer_chunks (
    tenant      text        NOT NULL,
    producer_id bytea       NOT NULL,
    sequence    bigint      NOT NULL,
    stored_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, producer_id, sequence)
);

-- Keys arrive in stored_at order, so pruning by age reads a BRIN range instead of the table.
CREATE INDEX producer_chunks_stored_at ON producer_chunks USING brin (stored_at);
