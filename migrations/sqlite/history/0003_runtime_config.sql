-- Named settings (the runtime configuration of `POST /configure` when the history is on
-- Postgres; the same table here keeps both databases alike). `version` grows with each change.
create table if not exists runtime_config (
    name text primary key,
    value text not null,
    version integer not null,
    updated_at integer not null
);
