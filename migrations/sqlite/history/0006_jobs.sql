-- Queued adds (`async_mode`): the request as received, the caller it runs as, and its outcome.
-- Claimed oldest first, one at a time per scope (`scope_key`), so two adds of one conversation
-- never run at once; a claim holds a lease, and a job whose lease ran out (its server died) is
-- claimed again. Deleting a scope cancels its queued jobs; a finished job keeps its outcome, not
-- its request. Times are microseconds.
create table if not exists jobs (
    id text primary key,
    seq integer not null,
    tenant text not null,
    scope_key text not null,
    user_id text,
    agent_id text,
    run_id text,
    caller text not null,
    request text not null,
    status text not null,
    attempts integer not null default 0,
    not_before integer not null,
    lease_until integer,
    created_at integer not null,
    started_at integer,
    finished_at integer,
    result text,
    error text
);
create index if not exists jobs_open on jobs (status, seq);
create index if not exists jobs_scope on jobs (scope_key, seq);
create index if not exists jobs_tenant on jobs (tenant, status);
create index if not exists jobs_finished on jobs (finished_at);
