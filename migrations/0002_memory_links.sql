-- Facts extracted by the LLM keep the ids of the existing memories they relate to and the named
-- things they mention (used by entity linking).
alter table memories add column if not exists linked_memory_ids uuid[] not null default '{}';
alter table memories add column if not exists entities text[] not null default '{}';
