-- The stream catalog: each label set a tenant's service has stored records with, and the newest
-- hour (of record time, hours since the Unix epoch) it had one in. A stream selector on labels
-- other than the service (`{job="cron"}`) reads it first, so that the scan of the read index
-- fetches from the table only the rows of services that can match.
CREATE TABLE streams (
    tenant    TEXT    NOT NULL,
    service   TEXT    NOT NULL,
    labels    TEXT    NOT NULL,
    last_hour INTEGER NOT NULL,
    PRIMARY KEY (tenant, service, labels)
) WITHOUT ROWID;

INSERT INTO streams (tenant, service, labels, last_hour)
    SELECT tenant, service, labels, max(ts) / 3600000000 FROM logs GROUP BY tenant, service, labels;
