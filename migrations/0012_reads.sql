-- Reads of memories (as migrations/sqlite/memories/0005_reads.sql): when each was last fetched by
-- id or returned by a search, and how often, for decay by use. Written in batches off the request
-- path; goes with its memory.
create table if not exists memory_reads (
    memory_id uuid primary key references memories (id) on delete cascade,
    tenant text not null,
    last_read_at timestamptz not null,
    reads bigint not null
);
