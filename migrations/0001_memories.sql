-- Memories and their embeddings (the production store).
-- The embedding column gets its dimension at first start, from the configured embedder
-- (PgVectorStore::ensure_dimension), together with its HNSW index.
create extension if not exists vector;

create table if not exists store_meta (
    key text primary key,
    value text not null
);

create table if not exists memories (
    id uuid primary key,
    tenant text not null,
    user_id text,
    agent_id text,
    run_id text,
    memory text not null,
    hash text not null,
    metadata jsonb not null default '{}'::jsonb,
    created_at timestamptz not null,
    updated_at timestamptz not null,
    expiration_date date,
    attributed_to text,
    role text,
    actor_id text,
    memory_type text,
    embedding vector not null
);

create index if not exists memories_user on memories (tenant, user_id, created_at desc, id desc);
create index if not exists memories_agent on memories (tenant, agent_id, created_at desc, id desc);
create index if not exists memories_run on memories (tenant, run_id, created_at desc, id desc);
create index if not exists memories_created on memories (tenant, created_at desc, id desc);
create index if not exists memories_hash on memories (tenant, hash);
create index if not exists memories_metadata on memories using gin (metadata jsonb_path_ops);

create table if not exists memories_entities (
    id uuid primary key,
    tenant text not null,
    user_id text,
    agent_id text,
    run_id text,
    entity text not null,
    entity_type text not null,
    linked_memory_ids uuid[] not null default '{}',
    embedding vector not null
);

create index if not exists memories_entities_scope on memories_entities (tenant, user_id, agent_id, run_id);
