-- The history on Postgres (`memory.history.provider = "postgres"`): the change history of every
-- memory, the conversation buffer of fact extraction, the request log, API keys and the runtime
-- configuration, in the store's database so that several replicas share them and a memory write
-- commits its history in its own transaction. The same tables as the SQLite history volume
-- (migrations/sqlite/history), with the same columns: ids as text and times as microseconds since
-- the Unix epoch (UTC), so one code path reads and writes both. Created whatever the history
-- provider; they stay empty with the SQLite one.
create table if not exists history (
    id text primary key,
    tenant text not null,
    memory_id text not null,
    user_id text,
    agent_id text,
    run_id text,
    old_memory text,
    new_memory text,
    event text not null,
    created_at bigint not null,
    updated_at bigint,
    is_deleted boolean not null default false,
    actor_id text,
    role text
);
create index if not exists history_memory on history (tenant, memory_id, created_at, id);

create table if not exists messages (
    id text primary key,
    tenant text not null,
    session_scope text not null,
    role text not null,
    content text not null,
    name text,
    created_at bigint not null,
    seq bigint not null
);
create index if not exists messages_scope on messages (tenant, session_scope, seq);

-- Buffered-message batches already delivered: delivering one again adds nothing.
create table if not exists message_batches (
    id text primary key,
    delivered_at bigint not null
);
create index if not exists message_batches_delivered on message_batches (delivered_at);

create table if not exists request_log (
    id bigint generated always as identity primary key,
    at bigint not null,
    method text not null,
    route text not null,
    status bigint not null,
    latency_ms double precision not null,
    principal_id text,
    tenant text
);
create index if not exists request_log_tenant on request_log (tenant, id);
create index if not exists request_log_at on request_log (at);

create table if not exists api_keys (
    id text primary key,
    tenant text not null,
    key_prefix text not null,
    key_hash bytea not null,
    label text not null,
    role text not null,
    user_ids text,
    agent_ids text,
    created_by text not null,
    created_at bigint not null,
    last_used_at bigint,
    revoked_at bigint
);
create index if not exists api_keys_prefix on api_keys (key_prefix);
create index if not exists api_keys_tenant on api_keys (tenant, created_at);

-- The runtime configuration set through `POST /configure` (without secrets), one row per name;
-- `version` grows with every change so replicas can tell a newer one.
create table if not exists runtime_config (
    name text primary key,
    value text not null,
    version bigint not null,
    updated_at bigint not null
);
