-- The service joins the read index as its last key: a query that names a service
-- (`{service_name="api"}`) tests each row's service in the index and reads from the table only
-- the rows it keeps. The index is still filled in time order, so ingest barely pays for it.
DROP INDEX logs_tenant_ts;
CREATE INDEX logs_tenant_ts_service ON logs (tenant, ts, service);
