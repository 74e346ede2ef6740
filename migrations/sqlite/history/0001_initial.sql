-- The history volume (SQLite): the change history of every memory, the conversation buffer of
-- fact extraction, the request log and API keys (see migrations/README.md).
-- Written so that it also applies to a database created before migration files existed.
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
    created_at integer not null,
    updated_at integer,
    is_deleted integer not null default 0,
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
    created_at integer not null,
    seq integer not null
);
create index if not exists messages_scope on messages (tenant, session_scope, created_at, seq);
create table if not exists request_log (
    id integer primary key autoincrement,
    at integer not null,
    method text not null,
    route text not null,
    status integer not null,
    latency_ms real not null,
    principal_id text,
    tenant text
);
create index if not exists request_log_tenant on request_log (tenant, id);
create index if not exists request_log_at on request_log (at);
create table if not exists api_keys (
    id text primary key,
    tenant text not null,
    key_prefix text not null,
    key_hash blob not null,
    label text not null,
    role text not null,
    user_ids text,
    agent_ids text,
    created_by text not null,
    created_at integer not null,
    last_used_at integer,
    revoked_at integer
);
create index if not exists api_keys_prefix on api_keys (key_prefix);
create index if not exists api_keys_tenant on api_keys (tenant, created_at);
