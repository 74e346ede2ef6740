-- Current truth over an append-only history (as migrations/sqlite/memories/0004_state.sql): a
-- memory may be the value of a state key (`user.home_city`); of the memories of one key and scope
-- only the newest by event time is current, older ones are `superseded` (by `superseded_by`, until
-- `valid_to`) and hidden from search and listing unless asked for. Keyword postings carry the
-- status (in the index-only range of each term) so BM25 candidates honour it without reading
-- memory rows; triggers keep it in step.
alter table memories add column if not exists state_key text;
alter table memories add column if not exists status text not null default 'active';
alter table memories add column if not exists superseded_by uuid;
alter table memories add column if not exists valid_to timestamptz;
alter table memories add column if not exists event_time timestamptz;
create index if not exists memories_state_key on memories (tenant, state_key) where state_key is not null;

alter table keyword_postings add column if not exists status text not null default 'active';
drop index if exists keyword_postings_term;
create index keyword_postings_term on keyword_postings (tenant, term, user_id)
    include (agent_id, run_id, expiration_date, doc_len, tf, memory_id, status);

create or replace function keyword_postings_write() returns trigger language plpgsql as $$
begin
    if tg_op = 'UPDATE' then
        delete from keyword_postings where memory_id = old.id;
    end if;
    insert into keyword_postings (tenant, term, user_id, memory_id, agent_id, run_id, expiration_date, doc_len, tf,
            status)
        select new.tenant, t.term, new.user_id, new.id, new.agent_id, new.run_id, new.expiration_date, new.doc_len,
            count(*), new.status
        from unnest(string_to_array(new.text_lemmatized, ' ')) as t(term) where t.term <> '' group by t.term;
    return null;
end $$;

create or replace function keyword_postings_status() returns trigger language plpgsql as $$
begin
    update keyword_postings set status = new.status where memory_id = new.id;
    return null;
end $$;
drop trigger if exists keyword_postings_status on memories;
create trigger keyword_postings_status after update of status on memories
    for each row when (old.status is distinct from new.status) execute function keyword_postings_status();
