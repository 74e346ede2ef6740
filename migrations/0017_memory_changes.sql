-- The change feed of the in-process scope indexes (crates/mem0-core/src/store/index.rs): every
-- committed change to a memory row, its entity links or a scope's entity rows leaves one row
-- here, tagged with the writing transaction's id. A server whose index of a scope reflects every
-- transaction below snapshot xmin X reloads the rows of the changes with xid >= X, whichever
-- server wrote them. Rows older than a few minutes are pruned by the servers; the horizon is the
-- lowest xid whose changes are all still here (an index older than it is rebuilt).
create table if not exists memory_changes (
    xid bigint not null,
    tenant text not null,
    -- The memory; the nil uuid for a change to the scope's entity rows.
    id uuid not null,
    user_id text,
    agent_id text,
    run_id text,
    recorded_at timestamptz not null default clock_timestamp()
);
create index if not exists memory_changes_tenant on memory_changes (tenant, xid);
create index if not exists memory_changes_recorded on memory_changes (recorded_at);

create table if not exists memory_changes_horizon (
    only_row boolean primary key default true check (only_row),
    xid bigint not null
);
insert into memory_changes_horizon (xid) values (0) on conflict do nothing;

-- Statement-level triggers read the statement's rows from a transition table (one event per
-- trigger: Postgres allows transition tables on single-event triggers only).
create or replace function memory_changes_of_memories() returns trigger language plpgsql as $$
begin
    insert into memory_changes (xid, tenant, id, user_id, agent_id, run_id)
        select pg_current_xact_id()::text::bigint, tenant, id, user_id, agent_id, run_id from changed;
    return null;
end $$;

create or replace function memory_changes_of_entities() returns trigger language plpgsql as $$
begin
    insert into memory_changes (xid, tenant, id, user_id, agent_id, run_id)
        select distinct pg_current_xact_id()::text::bigint, tenant, '00000000-0000-0000-0000-000000000000'::uuid,
            user_id, agent_id, run_id
        from changed;
    return null;
end $$;

-- A link's memory exists while the link is inserted; a link deleted with its memory is fed by
-- the memory's own trigger.
create or replace function memory_changes_of_links() returns trigger language plpgsql as $$
begin
    insert into memory_changes (xid, tenant, id, user_id, agent_id, run_id)
        select distinct pg_current_xact_id()::text::bigint, m.tenant, m.id, m.user_id, m.agent_id, m.run_id
        from changed c join memories m on m.id = c.memory_id;
    return null;
end $$;

create trigger memory_changes_insert after insert on memories
    referencing new table as changed for each statement execute function memory_changes_of_memories();
-- The new scope; a memory that left a scope is found by the index that holds it.
create trigger memory_changes_update after update on memories
    referencing new table as changed for each statement execute function memory_changes_of_memories();
create trigger memory_changes_delete after delete on memories
    referencing old table as changed for each statement execute function memory_changes_of_memories();

create trigger memory_changes_insert after insert on memories_entities
    referencing new table as changed for each statement execute function memory_changes_of_entities();
create trigger memory_changes_update after update on memories_entities
    referencing new table as changed for each statement execute function memory_changes_of_entities();
create trigger memory_changes_delete after delete on memories_entities
    referencing old table as changed for each statement execute function memory_changes_of_entities();

create trigger memory_changes_insert after insert on memory_entity_links
    referencing new table as changed for each statement execute function memory_changes_of_links();
create trigger memory_changes_delete after delete on memory_entity_links
    referencing old table as changed for each statement execute function memory_changes_of_links();
