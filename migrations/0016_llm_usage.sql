-- LLM token accounting (the history in Postgres): per tenant, UTC day (YYYY-MM-DD), provider,
-- model and purpose (extraction, procedural memory, rerank) the number of calls and the tokens
-- the provider reported, added to by every call. Kept when the tenant's memories are reset.
create table if not exists llm_usage (
    tenant text not null,
    day text not null,
    provider text not null,
    model text not null,
    purpose text not null,
    calls bigint not null default 0,
    prompt_tokens bigint not null default 0,
    completion_tokens bigint not null default 0,
    primary key (tenant, day, provider, model, purpose)
);
