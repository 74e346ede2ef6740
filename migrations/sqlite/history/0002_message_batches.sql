-- Conversation-buffer batches already delivered from the journal: delivering one again (after a
-- crash, or by the periodic sweep) adds nothing, even when its messages were trimmed away since.
create table if not exists message_batches (
    id text primary key,
    delivered_at integer not null
);
create index if not exists message_batches_delivered on message_batches (delivered_at);
