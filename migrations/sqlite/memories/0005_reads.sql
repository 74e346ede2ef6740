-- Reads of memories (as migrations/0012_reads.sql): when each was last fetched by id or returned
-- by a search, and how often, for decay by use. Written in batches off the request path; goes
-- with its memory.
create table memory_reads (
    memory_id text primary key references memories (id) on delete cascade,
    tenant text not null,
    last_read_at integer not null,
    reads integer not null
);
