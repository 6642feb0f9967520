-- The stream catalog: the label sets each tenant's services stored records with, one row for each
-- hour of record time they had one in. A stream selector on labels other than the service
-- (`{job="cron"}`, `{env=~"prod|dev"}`) reads it first and becomes a selection of services, which
-- a past heap hour's btree and a sealed hour's chunk groups both skip by. A row per hour, inserted
-- once and never updated: batches of one stream written at the same time never wait on each
-- other for a row lock.
CREATE TABLE streams (
    tenant  text        NOT NULL,
    hour    timestamptz NOT NULL,
    service text        NOT NULL,
    labels  jsonb       NOT NULL,
    PRIMARY KEY (tenant, hour, service, labels)
);

INSERT INTO streams (tenant, hour, service, labels)
    SELECT DISTINCT tenant, date_bin('1 hour', ts, TIMESTAMPTZ '2000-01-01 00:00:00+00'), service, labels
    FROM logs;
