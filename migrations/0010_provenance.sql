-- Provenance of every memory (as migrations/sqlite/memories/0003_provenance.sql): what kind of
-- source said it, who, through which credential, on what evidence, and how sure. Memories stored
-- before get what their columns tell: a verbatim message by its role, an extracted fact or
-- procedural summary as written by a model, anything else as imported; confidence by source type.
alter table memories add column if not exists source_type text not null default 'imported';
alter table memories add column if not exists source_actor text;
alter table memories add column if not exists source_app text;
alter table memories add column if not exists evidence_ref text;
alter table memories add column if not exists confidence double precision not null default 0.8;
update memories set
    source_type = case
        when memory_type = 'procedural_memory' or attributed_to is not null then 'agent_inferred'
        when role = 'user' then 'user_stated'
        when role = 'assistant' then 'assistant_stated'
        else 'imported'
    end,
    source_actor = actor_id,
    confidence = case
        when memory_type = 'procedural_memory' or attributed_to is not null then 0.7
        when role = 'user' then 0.9
        when role = 'assistant' then 0.7
        else 0.8
    end;
create index if not exists memories_source_type on memories (tenant, source_type);
