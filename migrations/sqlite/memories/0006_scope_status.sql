-- The scope indexes carry the status too. Without it every search and listing had to read each
-- memory row of the scope to check its status, and the status column (added in 0004) sits after
-- the embedding, so SQLite walked the row's overflow pages for it: dense search at 1,000
-- memories per user took 2.3 ms of CPU instead of ~0.7 ms. With it the scope's visible ids come
-- from the index alone.
drop index memories_user;
drop index memories_agent;
drop index memories_run;
drop index memories_created;
create index memories_user on memories (tenant, user_id, created_at desc, id desc, expiration_date, status);
create index memories_agent on memories (tenant, agent_id, created_at desc, id desc, expiration_date, status);
create index memories_run on memories (tenant, run_id, created_at desc, id desc, expiration_date, status);
create index memories_created on memories (tenant, created_at desc, id desc, expiration_date, status);
