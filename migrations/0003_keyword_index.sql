-- Keyword retrieval (BM25 over the caller's scope): every memory keeps its analysed text
-- (terms joined by spaces, computed by the server's text analysis), its length in terms, and
-- the terms as an array with a GIN index, so the memories containing any query term are found
-- without scanning the scope. Term frequencies come from unnesting the array; IDF and length
-- normalisation are computed over exactly the memories of the request's scope.
alter table memories add column if not exists text_lemmatized text not null default '';
alter table memories add column if not exists doc_len integer not null default 0;
alter table memories add column if not exists terms text[]
    generated always as (string_to_array(text_lemmatized, ' ')) stored;
create index if not exists memories_terms on memories using gin (terms);
