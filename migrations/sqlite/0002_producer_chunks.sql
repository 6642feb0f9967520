-- Chunks stored under a producer id and sequence number, so a retried chunk is stored once.
-- A key is claimed in the same transaction that inserts the chunk's records: it exists iff they
-- were committed. stored_at is microseconds since the Unix epoch; keys older than the dedup
-- window are deleted by the retention task. sequence holds the unsigned wire value's bits.
CREATE TABLE producer_chunks (
    tenant      TEXT    NOT NULL,
    producer_id BLOB    NOT NULL,
    sequence    INTEGER NOT NULL,
    stored_at   INTEGER NOT NULL,
    PRIMARY KEY (tenant, producer_id, sequence)
);

CREATE INDEX producer_chunks_stored_at ON producer_chunks (stored_at);
