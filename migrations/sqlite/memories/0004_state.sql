-- Current truth over an append-only history (as migrations/0011_state.sql): a memory may be the
-- value of a state key (`user.home_city`); of the memories of one key and scope only the newest by
-- event time is current, older ones are `superseded` (by `superseded_by`, until `valid_to`) and
-- hidden from search and listing unless asked for. Keyword postings carry the status so BM25
-- candidates honour it without reading memory rows; a trigger keeps it in step.
alter table memories add column state_key text;
alter table memories add column status text not null default 'active';
alter table memories add column superseded_by text;
alter table memories add column valid_to integer;
alter table memories add column event_time integer;
create index memories_state_key on memories (tenant, state_key) where state_key is not null;
alter table keyword_postings add column status text not null default 'active';
create trigger keyword_postings_status after update of status on memories begin
    update keyword_postings set status = new.status where memory_id = new.id;
end;
