-- Webhooks: where a tenant's events are posted, signed with the webhook's secret (kept to sign;
-- shown to its creator once), and which events it wants (a JSON array). `consecutive_failures`
-- counts failed attempts since the last success; a delivery that is given up while nothing has
-- succeeded since it was queued disables its webhook (`disabled_reason`).
create table if not exists webhooks (
    id text primary key,
    tenant text not null,
    url text not null,
    secret text not null,
    events text not null,
    description text,
    enabled bigint not null,
    disabled_reason text,
    consecutive_failures bigint not null default 0,
    created_at bigint not null,
    last_success_at bigint,
    last_failure_at bigint
);
create index if not exists webhooks_tenant on webhooks (tenant);

-- One event for one webhook: its body (signed when sent), and its attempts. `pending` waits for
-- `next_attempt_at`; `sending` is held by a worker until `lease_until`; `succeeded` and `failed`
-- are final. Times are microseconds.
create table if not exists webhook_deliveries (
    id text primary key,
    webhook_id text not null,
    tenant text not null,
    event_id text not null,
    event text not null,
    body text not null,
    status text not null,
    attempts bigint not null default 0,
    created_at bigint not null,
    next_attempt_at bigint not null,
    lease_until bigint,
    last_attempt_at bigint,
    response_status bigint,
    error text,
    finished_at bigint
);
create index if not exists webhook_deliveries_due on webhook_deliveries (status, next_attempt_at);
create index if not exists webhook_deliveries_webhook on webhook_deliveries (webhook_id, created_at);
create index if not exists webhook_deliveries_finished on webhook_deliveries (finished_at);
