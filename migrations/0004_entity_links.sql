-- Entity linking: one row per entity per scope (matched on its normalised name, or merged with
-- a near-identical embedding), and a link table from memories to entities. Deleting a memory
-- removes its links (cascade); the server removes entities left without links.
alter table memories_entities drop column if exists linked_memory_ids;
alter table memories_entities add column if not exists normalized text not null default '';
create index if not exists memories_entities_name on memories_entities (tenant, normalized);

create table if not exists memory_entity_links (
    memory_id uuid not null references memories (id) on delete cascade,
    entity_id uuid not null references memories_entities (id) on delete cascade,
    primary key (memory_id, entity_id)
);
create index if not exists memory_entity_links_entity on memory_entity_links (entity_id);
