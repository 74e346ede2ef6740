-- Idempotency keys (`Idempotency-Key` on writes), per tenant: the fingerprint of the first
-- request and, once it finished, its response, replayed to retries for 24 hours. A row without
-- a status is a request still running.
create table if not exists idempotency_keys (
    tenant text not null,
    key text not null,
    fingerprint text not null,
    status integer,
    body blob,
    created_at integer not null,
    primary key (tenant, key)
);
create index if not exists idempotency_keys_created on idempotency_keys (created_at);
