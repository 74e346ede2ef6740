-- Keyword postings carry what a scoped search filters and scores on (scope ids, expiration, length),
-- so BM25 is summed over one index range per query term without reading the memory rows; and
-- per-scope statistics (memory count, total length) are kept by triggers in every write's
-- transaction instead of being counted on every search.
-- `user_id` is '' for memories without one: primary-key columns of a WITHOUT ROWID table cannot be
-- null, and scope ids are never empty.
create table keyword_postings (
    tenant text not null,
    term text not null,
    user_id text not null,
    memory_id text not null references memories (id) on delete cascade,
    agent_id text,
    run_id text,
    expiration_date text,
    doc_len integer not null,
    tf integer not null,
    primary key (tenant, term, user_id, memory_id)
) without rowid;
create index keyword_postings_memory on keyword_postings (memory_id);
insert into keyword_postings (tenant, term, user_id, memory_id, agent_id, run_id, expiration_date, doc_len, tf)
    select t.tenant, t.term, ifnull(m.user_id, ''), t.memory_id, m.agent_id, m.run_id, m.expiration_date, m.doc_len,
        t.tf
    from memory_terms t join memories m on m.id = t.memory_id;
drop table memory_terms;

-- Scope ids are '' where the memories have none.
create table keyword_stats (
    tenant text not null,
    user_id text not null,
    agent_id text not null,
    run_id text not null,
    docs integer not null,
    total_len integer not null,
    primary key (tenant, user_id, agent_id, run_id)
) without rowid;
insert into keyword_stats (tenant, user_id, agent_id, run_id, docs, total_len)
    select tenant, ifnull(user_id, ''), ifnull(agent_id, ''), ifnull(run_id, ''), count(*), sum(doc_len)
    from memories group by 1, 2, 3, 4;
create trigger keyword_stats_insert after insert on memories begin
    insert into keyword_stats (tenant, user_id, agent_id, run_id, docs, total_len)
        values (new.tenant, ifnull(new.user_id, ''), ifnull(new.agent_id, ''), ifnull(new.run_id, ''), 1, new.doc_len)
        on conflict do update set docs = docs + 1, total_len = total_len + excluded.total_len;
end;
create trigger keyword_stats_delete after delete on memories begin
    update keyword_stats set docs = docs - 1, total_len = total_len - old.doc_len
        where tenant = old.tenant and user_id = ifnull(old.user_id, '') and agent_id = ifnull(old.agent_id, '')
        and run_id = ifnull(old.run_id, '');
    delete from keyword_stats
        where tenant = old.tenant and user_id = ifnull(old.user_id, '') and agent_id = ifnull(old.agent_id, '')
        and run_id = ifnull(old.run_id, '') and docs <= 0;
end;
create trigger keyword_stats_update after update of doc_len, tenant, user_id, agent_id, run_id on memories begin
    update keyword_stats set docs = docs - 1, total_len = total_len - old.doc_len
        where tenant = old.tenant and user_id = ifnull(old.user_id, '') and agent_id = ifnull(old.agent_id, '')
        and run_id = ifnull(old.run_id, '');
    insert into keyword_stats (tenant, user_id, agent_id, run_id, docs, total_len)
        values (new.tenant, ifnull(new.user_id, ''), ifnull(new.agent_id, ''), ifnull(new.run_id, ''), 1, new.doc_len)
        on conflict do update set docs = docs + 1, total_len = total_len + excluded.total_len;
    delete from keyword_stats
        where tenant = old.tenant and user_id = ifnull(old.user_id, '') and agent_id = ifnull(old.agent_id, '')
        and run_id = ifnull(old.run_id, '') and docs <= 0;
end;
