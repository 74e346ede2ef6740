-- One entity row per (tenant, scope, normalised name), enforced: concurrent writers naming the
-- same new entity upsert against this index instead of creating two rows. Duplicates an older
-- version could leave behind are merged into the oldest row first.
with ranked as (
    select id, first_value(id) over (
        partition by tenant, coalesce(user_id, ''), coalesce(agent_id, ''), coalesce(run_id, ''), normalized
        order by id) as keep
    from memories_entities where normalized <> ''
)
insert into memory_entity_links (memory_id, entity_id)
    select l.memory_id, r.keep from memory_entity_links l join ranked r on r.id = l.entity_id where r.id <> r.keep
    on conflict do nothing;
with ranked as (
    select id, first_value(id) over (
        partition by tenant, coalesce(user_id, ''), coalesce(agent_id, ''), coalesce(run_id, ''), normalized
        order by id) as keep
    from memories_entities where normalized <> ''
)
delete from memories_entities e using ranked r where e.id = r.id and r.id <> r.keep;
create unique index if not exists memories_entities_unique on memories_entities
    (tenant, coalesce(user_id, ''), coalesce(agent_id, ''), coalesce(run_id, ''), normalized)
    where normalized <> '';

-- The history journal: a change to memories and the history entries (and buffered messages)
-- describing it commit together here; the server then delivers them to the history volume and
-- removes them. Entries left by a crash in between are delivered at the next start.
create table if not exists history_journal (
    id uuid primary key,
    tenant text not null,
    memory_id uuid,
    created_at timestamptz not null,
    payload jsonb not null
);
create index if not exists history_journal_created on history_journal (created_at, id);
