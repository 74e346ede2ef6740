-- Keyword postings carry what a scoped search filters and scores on (scope ids, expiration, length),
-- so BM25 is summed over index-only ranges per query term instead of reading every matching memory
-- row; per-scope statistics (memory count, total length) are kept instead of counted per search.
-- Both are maintained by triggers in the transaction of every write, COPY imports included.
create table if not exists keyword_postings (
    tenant text not null,
    term text not null,
    user_id text,
    memory_id uuid not null references memories (id) on delete cascade,
    agent_id text,
    run_id text,
    expiration_date date,
    doc_len integer not null,
    tf integer not null,
    primary key (memory_id, term)
);
create index if not exists keyword_postings_term on keyword_postings (tenant, term, user_id)
    include (agent_id, run_id, expiration_date, doc_len, tf, memory_id);
insert into keyword_postings (tenant, term, user_id, memory_id, agent_id, run_id, expiration_date, doc_len, tf)
    select m.tenant, t.term, m.user_id, m.id, m.agent_id, m.run_id, m.expiration_date, m.doc_len, count(*)
    from memories m cross join lateral unnest(string_to_array(m.text_lemmatized, ' ')) as t(term)
    where t.term <> '' group by m.id, t.term
    on conflict do nothing;

create or replace function keyword_postings_write() returns trigger language plpgsql as $$
begin
    if tg_op = 'UPDATE' then
        delete from keyword_postings where memory_id = old.id;
    end if;
    insert into keyword_postings (tenant, term, user_id, memory_id, agent_id, run_id, expiration_date, doc_len, tf)
        select new.tenant, t.term, new.user_id, new.id, new.agent_id, new.run_id, new.expiration_date, new.doc_len,
            count(*)
        from unnest(string_to_array(new.text_lemmatized, ' ')) as t(term) where t.term <> '' group by t.term;
    return null;
end $$;
drop trigger if exists keyword_postings_insert on memories;
create trigger keyword_postings_insert after insert on memories
    for each row execute function keyword_postings_write();
drop trigger if exists keyword_postings_update on memories;
create trigger keyword_postings_update
    after update of text_lemmatized, doc_len, expiration_date, tenant, user_id, agent_id, run_id on memories
    for each row execute function keyword_postings_write();

-- Scope ids are '' where the memories have none.
create table if not exists keyword_stats (
    tenant text not null,
    user_id text not null,
    agent_id text not null,
    run_id text not null,
    docs bigint not null,
    total_len bigint not null,
    primary key (tenant, user_id, agent_id, run_id)
);
insert into keyword_stats (tenant, user_id, agent_id, run_id, docs, total_len)
    select tenant, coalesce(user_id, ''), coalesce(agent_id, ''), coalesce(run_id, ''), count(*),
        coalesce(sum(doc_len), 0)
    from memories group by 1, 2, 3, 4
    on conflict do nothing;

create or replace function keyword_stats_write() returns trigger language plpgsql as $$
begin
    if tg_op in ('UPDATE', 'DELETE') then
        update keyword_stats set docs = docs - 1, total_len = total_len - old.doc_len
            where tenant = old.tenant and user_id = coalesce(old.user_id, '')
            and agent_id = coalesce(old.agent_id, '') and run_id = coalesce(old.run_id, '');
    end if;
    if tg_op in ('INSERT', 'UPDATE') then
        insert into keyword_stats (tenant, user_id, agent_id, run_id, docs, total_len)
            values (new.tenant, coalesce(new.user_id, ''), coalesce(new.agent_id, ''), coalesce(new.run_id, ''), 1,
                new.doc_len)
            on conflict (tenant, user_id, agent_id, run_id) do update
            set docs = keyword_stats.docs + 1, total_len = keyword_stats.total_len + excluded.total_len;
    end if;
    return null;
end $$;
drop trigger if exists keyword_stats_insert_delete on memories;
create trigger keyword_stats_insert_delete after insert or delete on memories
    for each row execute function keyword_stats_write();
drop trigger if exists keyword_stats_update on memories;
create trigger keyword_stats_update after update of doc_len, tenant, user_id, agent_id, run_id on memories
    for each row execute function keyword_stats_write();

-- The generated term array and its GIN index served the old keyword search; the postings replace them.
drop index if exists memories_terms;
alter table memories drop column if exists terms;
