-- The audit trail: who read or changed which memory, when, through which credential, and the
-- write policy's decisions. One row per memory touched; never memory text or queries. Kept for
-- `audit.retention_days`; a reset leaves it (the reset itself is an entry).
create table if not exists audit_log (
    id integer primary key autoincrement,
    at integer not null,
    tenant text not null,
    principal_id text not null,
    action text not null,
    memory_id text,
    request_id text,
    detail text
);
create index if not exists audit_log_tenant on audit_log (tenant, id);
create index if not exists audit_log_memory on audit_log (memory_id, id);
create index if not exists audit_log_principal on audit_log (principal_id, id);
create index if not exists audit_log_at on audit_log (at);
