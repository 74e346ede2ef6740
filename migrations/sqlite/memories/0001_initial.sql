-- The embedded store (SQLite): memories with their embeddings, the keyword index (postings),
-- entity rows and links per scope, and the history journal (see migrations/README.md).
-- Written so that it also applies to a database created before migration files existed.
create table if not exists store_meta (
    key text primary key,
    value text not null
);
create table if not exists memories (
    id text primary key,
    tenant text not null,
    user_id text,
    agent_id text,
    run_id text,
    memory text not null,
    hash text not null,
    metadata text not null default '{}',
    created_at integer not null,
    updated_at integer not null,
    expiration_date text,
    attributed_to text,
    role text,
    actor_id text,
    memory_type text,
    linked_memory_ids text not null default '[]',
    entities text not null default '[]',
    text_lemmatized text not null default '',
    doc_len integer not null default 0,
    embedding blob not null
);
create index if not exists memories_user on memories (tenant, user_id, created_at desc, id desc, expiration_date);
create index if not exists memories_agent on memories (tenant, agent_id, created_at desc, id desc, expiration_date);
create index if not exists memories_run on memories (tenant, run_id, created_at desc, id desc, expiration_date);
create index if not exists memories_created on memories (tenant, created_at desc, id desc, expiration_date);
create index if not exists memories_hash on memories (tenant, hash);
create table if not exists memory_terms (
    tenant text not null,
    term text not null,
    memory_id text not null references memories (id) on delete cascade,
    tf integer not null,
    primary key (tenant, term, memory_id)
) without rowid;
create index if not exists memory_terms_memory on memory_terms (memory_id);
create table if not exists memories_entities (
    id text primary key,
    tenant text not null,
    user_id text,
    agent_id text,
    run_id text,
    entity text not null,
    normalized text not null default '',
    entity_type text not null,
    embedding blob not null
);
create index if not exists memories_entities_scope on memories_entities (tenant, user_id, agent_id, run_id);
create table if not exists memory_entity_links (
    memory_id text not null references memories (id) on delete cascade,
    entity_id text not null references memories_entities (id) on delete cascade,
    primary key (memory_id, entity_id)
) without rowid;
create index if not exists memory_entity_links_entity on memory_entity_links (entity_id);
create index if not exists memories_entities_name on memories_entities (tenant, normalized);
create table if not exists history_journal (
    id text primary key,
    tenant text not null,
    memory_id text,
    created_at integer not null,
    payload text not null
);
create index if not exists history_journal_created on history_journal (created_at, id);

-- One entity row per (tenant, scope, normalised name); duplicates an older version could leave
-- behind are merged into the oldest row first.
insert or ignore into memory_entity_links (memory_id, entity_id)
    select l.memory_id, k.keep from memory_entity_links l join (
        select e.id, (select min(o.id) from memories_entities o where o.tenant = e.tenant
            and ifnull(o.user_id, '') = ifnull(e.user_id, '') and ifnull(o.agent_id, '') = ifnull(e.agent_id, '')
            and ifnull(o.run_id, '') = ifnull(e.run_id, '') and o.normalized = e.normalized) as keep
        from memories_entities e where e.normalized <> ''
    ) k on k.id = l.entity_id where k.keep <> k.id;
delete from memories_entities where normalized <> '' and id <> (select min(o.id) from memories_entities o
    where o.tenant = memories_entities.tenant and ifnull(o.user_id, '') = ifnull(memories_entities.user_id, '')
    and ifnull(o.agent_id, '') = ifnull(memories_entities.agent_id, '')
    and ifnull(o.run_id, '') = ifnull(memories_entities.run_id, '') and o.normalized = memories_entities.normalized);
create unique index if not exists memories_entities_unique on memories_entities
    (tenant, ifnull(user_id, ''), ifnull(agent_id, ''), ifnull(run_id, ''), normalized) where normalized <> '';
