//! Writes of the embedded store, inside one `BEGIN IMMEDIATE` transaction: memory rows with their
//! keyword postings, entity rows and links, the history journal.

use std::collections::HashMap;

use sqlx::Row;
use uuid::Uuid;

use super::codec::{decode_embedding, encode_embedding, from_micros, micros, row_to_record};
use super::{COLUMNS, FETCH_CHUNK};
use crate::error::{Error, Result};
use crate::scope::Scope;
use crate::state::resolve;
use crate::store::sql::{where_clause, Sqlite};
use crate::store::{
    cosine, doc_len, links_to_write, term_frequencies, without_known, Applied, EntityLink, ScopedQuery, WriteSet,
};
use crate::types::MemoryRecord;

/// Entity ids linked to any of `ids` (read before the memories are deleted).
pub(super) async fn linked_entities(executor: &mut sqlx::SqliteConnection, ids: &[String]) -> Result<Vec<String>> {
    let mut entities = Vec::new();
    for chunk in ids.chunks(FETCH_CHUNK) {
        let placeholders = vec!["?"; chunk.len()].join(", ");
        let statement =
            format!("select distinct entity_id from memory_entity_links where memory_id in ({placeholders})");
        let mut query = sqlx::query_scalar::<_, String>(&statement);
        for id in chunk {
            query = query.bind(id);
        }
        entities.extend(query.fetch_all(&mut *executor).await?);
    }
    Ok(entities)
}

/// Removes those of `entity_ids` that no memory links to any more.
pub(super) async fn remove_orphan_entities(executor: &mut sqlx::SqliteConnection, entity_ids: &[String]) -> Result<()> {
    for chunk in entity_ids.chunks(FETCH_CHUNK) {
        let placeholders = vec!["?"; chunk.len()].join(", ");
        let statement = format!(
            "delete from memories_entities where id in ({placeholders}) \
             and not exists (select 1 from memory_entity_links l where l.entity_id = memories_entities.id)"
        );
        let mut query = sqlx::query(&statement);
        for id in chunk {
            query = query.bind(id);
        }
        query.execute(&mut *executor).await?;
    }
    Ok(())
}

pub(super) use crate::store::index::ScopeEntities;

/// Entity rows of `scope`: with `exact`, rows of exactly these ids (absent ones absent, as
/// entities are stored per scope); otherwise every row under the present ids (as searches read).
pub(super) async fn scope_entities(
    executor: &mut sqlx::SqliteConnection,
    tenant: &str,
    scope: &Scope,
    exact: bool,
) -> Result<ScopeEntities> {
    let mut statement = "select id, normalized, embedding from memories_entities where tenant = ?".to_owned();
    let columns = [("user_id", &scope.user_id), ("agent_id", &scope.agent_id), ("run_id", &scope.run_id)];
    for (column, value) in columns {
        match value {
            Some(_) => statement.push_str(&format!(" and {column} = ?")),
            None if exact => statement.push_str(&format!(" and {column} is null")),
            None => {}
        }
    }
    let mut query = sqlx::query(&statement).bind(tenant);
    for value in columns.iter().filter_map(|(_, value)| value.as_ref()) {
        query = query.bind(value);
    }
    query
        .fetch_all(&mut *executor)
        .await?
        .iter()
        .map(|row| {
            let bytes: &[u8] = row.try_get(2)?;
            Ok((row.try_get(0)?, row.try_get(1)?, decode_embedding(bytes)))
        })
        .collect()
}

pub(super) async fn insert_one(executor: &mut sqlx::SqliteConnection, record: &MemoryRecord) -> Result<()> {
    let metadata = serde_json::Value::Object(record.metadata.clone()).to_string();
    let statement = format!(
        "insert into memories ({COLUMNS}) values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, \
         ?, ?, ?, ?, ?)"
    );
    let insert = sqlx::query(&statement)
        .bind(record.id.to_string())
        .bind(&record.tenant)
        .bind(&record.scope.user_id)
        .bind(&record.scope.agent_id)
        .bind(&record.scope.run_id)
        .bind(&record.memory)
        .bind(&record.hash)
        .bind(metadata)
        .bind(micros(record.created_at))
        .bind(micros(record.updated_at))
        .bind(record.expiration_date.map(|date| date.format("%Y-%m-%d").to_string()))
        .bind(&record.attributed_to)
        .bind(&record.role)
        .bind(&record.actor_id)
        .bind(&record.memory_type)
        .bind(serde_json::to_string(&record.linked_memory_ids).unwrap_or_else(|_| "[]".to_owned()))
        .bind(serde_json::to_string(&record.entities).unwrap_or_else(|_| "[]".to_owned()))
        .bind(&record.text_lemmatized)
        .bind(doc_len(&record.text_lemmatized))
        .bind(encode_embedding(&record.embedding));
    bind_provenance_and_state(insert, record).execute(&mut *executor).await?;
    write_terms(executor, record).await
}

/// Binds a record's provenance and state columns, in the order of [`COLUMNS`] (and of the update
/// statement).
fn bind_provenance_and_state<'q>(
    query: sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>>,
    record: &'q MemoryRecord,
) -> sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>> {
    query
        .bind(record.provenance.source_type.as_str())
        .bind(&record.provenance.source_actor)
        .bind(&record.provenance.source_app)
        .bind(&record.provenance.evidence_ref)
        .bind(record.provenance.stored_confidence())
        .bind(&record.state.state_key)
        .bind(record.state.status.as_str())
        .bind(record.state.superseded_by.map(|id| id.to_string()))
        .bind(record.state.valid_to.map(micros))
        .bind(record.state.event_time.map(micros))
}

/// Writes the keyword postings of a record (after removing any old ones), each carrying the
/// record's scope, expiration and length (see `migrations/sqlite/memories/0002_keyword_postings.sql`).
pub(super) async fn write_terms(executor: &mut sqlx::SqliteConnection, record: &MemoryRecord) -> Result<()> {
    sqlx::query("delete from keyword_postings where memory_id = ?")
        .bind(record.id.to_string())
        .execute(&mut *executor)
        .await?;
    let terms = term_frequencies(&record.text_lemmatized);
    let id = record.id.to_string();
    let user = record.scope.user_id.as_deref().unwrap_or("");
    let expiration = record.expiration_date.map(|date| date.format("%Y-%m-%d").to_string());
    let length = i64::from(doc_len(&record.text_lemmatized));
    // 10 parameters a row; SQLite allows 32766 per statement.
    for chunk in terms.chunks(500) {
        let rows = vec!["(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"; chunk.len()].join(", ");
        let statement = format!(
            "insert into keyword_postings (tenant, term, user_id, memory_id, agent_id, run_id, expiration_date, \
             doc_len, tf, status) values {rows}"
        );
        let mut insert = sqlx::query(&statement);
        for (term, tf) in chunk {
            insert = insert
                .bind(&record.tenant)
                .bind(term)
                .bind(user)
                .bind(&id)
                .bind(&record.scope.agent_id)
                .bind(&record.scope.run_id)
                .bind(&expiration)
                .bind(length)
                .bind(i64::from(*tf))
                .bind(record.state.status.as_str());
        }
        insert.execute(&mut *executor).await?;
    }
    Ok(())
}

/// Hashes among `hashes` that memories matching `query` already have.
async fn known_hashes(
    executor: &mut sqlx::SqliteConnection,
    query: &ScopedQuery,
    hashes: &[String],
) -> Result<std::collections::HashSet<String>> {
    let mut known = std::collections::HashSet::new();
    let (sql, binds) = where_clause(Sqlite, query, 1).into_parts();
    for chunk in hashes.chunks(FETCH_CHUNK) {
        let placeholders = vec!["?"; chunk.len()].join(", ");
        let statement = format!("select distinct hash from memories where {sql} and hash in ({placeholders})");
        let mut select = super::bind_all(sqlx::query(&statement), &binds);
        for hash in chunk {
            select = select.bind(hash);
        }
        for row in select.fetch_all(&mut *executor).await? {
            known.insert(row.try_get("hash")?);
        }
    }
    Ok(known)
}

/// Applies a write inside an open transaction (see [`WriteSet`] for the order).
/// Resolves the chains of the write's state keys again (the transaction is immediate: no other
/// writer runs until it commits). The postings follow the status by trigger.
/// Returns the ids of the rows it changed.
async fn resolve_states(executor: &mut sqlx::SqliteConnection, write: &WriteSet) -> Result<Vec<Uuid>> {
    let mut changed = Vec::new();
    for key in crate::store::keys_to_resolve(write) {
        let rows = sqlx::query(
            "select id, status, coalesce(event_time, created_at) as t, confidence, source_type, superseded_by, \
             valid_to from memories where tenant = ? and state_key = ? and user_id is ? and agent_id is ? \
             and run_id is ?",
        )
        .bind(&key.tenant)
        .bind(&key.key)
        .bind(&key.scope.user_id)
        .bind(&key.scope.agent_id)
        .bind(&key.scope.run_id)
        .fetch_all(&mut *executor)
        .await?;
        let chain = rows
            .iter()
            .map(|row| {
                let id: String = row.try_get("id")?;
                let superseded_by: Option<String> = row.try_get("superseded_by")?;
                let valid_to: Option<i64> = row.try_get("valid_to")?;
                crate::store::state_row(
                    super::parse_id(&id)?,
                    row.try_get("status")?,
                    from_micros(row.try_get("t")?)?,
                    row.try_get("confidence")?,
                    row.try_get("source_type")?,
                    superseded_by.as_deref().map(super::parse_id).transpose()?,
                    valid_to.map(from_micros).transpose()?,
                )
            })
            .collect::<Result<Vec<_>>>()?;
        for change in resolve(&chain) {
            sqlx::query("update memories set status = ?, superseded_by = ?, valid_to = ? where id = ?")
                .bind(change.status.as_str())
                .bind(change.superseded_by.map(|id| id.to_string()))
                .bind(change.valid_to.map(micros))
                .bind(change.id.to_string())
                .execute(&mut *executor)
                .await?;
            changed.push(change.id);
        }
    }
    Ok(changed)
}

/// Returns what was applied and the ids of rows whose state the key chains changed.
pub(super) async fn apply_in(executor: &mut sqlx::SqliteConnection, write: &WriteSet) -> Result<(Applied, Vec<Uuid>)> {
    let mut applied = Applied::default();
    for (id, expected) in &write.expect {
        let current: Option<i64> = sqlx::query_scalar("select updated_at from memories where id = ?")
            .bind(id.to_string())
            .fetch_optional(&mut *executor)
            .await?;
        if current != Some(micros(*expected)) {
            return Err(Error::Conflict(format!("memory {id} changed meanwhile")));
        }
    }
    let touched: Vec<String> = write.relink.iter().chain(&write.delete).map(Uuid::to_string).collect();
    applied.previous_links = load_links(executor, &touched).await?;
    let mut orphan_candidates = linked_entities(executor, &touched).await?;
    for chunk in write.delete.chunks(FETCH_CHUNK) {
        let placeholders = vec!["?"; chunk.len()].join(", ");
        let statement =
            format!("delete from memories where +tenant = ? and id in ({placeholders}) returning {COLUMNS}");
        let mut delete = sqlx::query(&statement).bind(&write.tenant);
        for id in chunk {
            delete = delete.bind(id.to_string());
        }
        for row in delete.fetch_all(&mut *executor).await? {
            applied.deleted.push(row_to_record(&row)?);
        }
    }
    applied.missing =
        write.delete.iter().filter(|id| !applied.deleted.iter().any(|record| record.id == **id)).copied().collect();
    if let (Some(missing), false) = (applied.missing.first(), write.skip_missing) {
        return Err(Error::MemoryNotFound { id: missing.to_string() });
    }
    for record in &write.update {
        let previous = sqlx::query(&format!("select {COLUMNS} from memories where tenant = ? and id = ?"))
            .bind(&record.tenant)
            .bind(record.id.to_string())
            .fetch_optional(&mut *executor)
            .await?
            .ok_or_else(|| Error::MemoryNotFound { id: record.id.to_string() })?;
        applied.replaced.push(row_to_record(&previous)?);
        update_one(executor, record).await?;
    }
    let inserts = match &write.unique_in {
        // The write transaction is immediate: no other writer runs until it commits.
        Some(query) => {
            let hashes: Vec<String> = write.insert.iter().map(|record| record.hash.clone()).collect();
            let (kept, skipped) = without_known(write, &known_hashes(executor, query, &hashes).await?);
            applied.skipped = skipped;
            std::borrow::Cow::Owned(kept)
        }
        None => std::borrow::Cow::Borrowed(&write.insert),
    };
    let inserts = if write.skip_existing_ids && !inserts.is_empty() {
        let mut existing = std::collections::HashSet::new();
        for chunk in inserts.chunks(FETCH_CHUNK) {
            let placeholders = vec!["?"; chunk.len()].join(", ");
            let statement = format!("select id from memories where id in ({placeholders})");
            let mut select = sqlx::query_scalar::<_, String>(&statement);
            for record in chunk {
                select = select.bind(record.id.to_string());
            }
            for id in select.fetch_all(&mut *executor).await? {
                existing.insert(Uuid::parse_str(&id).map_err(|_| Error::Internal(format!("bad memory id {id}")))?);
            }
        }
        let (kept, skipped) = crate::store::without_ids(inserts.into_owned(), &existing);
        applied.skipped.extend(skipped);
        std::borrow::Cow::Owned(kept)
    } else {
        inserts
    };
    for record in inserts.iter() {
        insert_one(executor, record).await?;
    }
    let restated = resolve_states(executor, write).await?;
    for chunk in touched.chunks(FETCH_CHUNK) {
        let placeholders = vec!["?"; chunk.len()].join(", ");
        let statement = format!("delete from memory_entity_links where memory_id in ({placeholders})");
        let mut unlink = sqlx::query(&statement);
        for id in chunk {
            unlink = unlink.bind(id);
        }
        unlink.execute(&mut *executor).await?;
    }
    add_links(executor, &links_to_write(write, &applied.skipped), write.merge_threshold).await?;
    orphan_candidates.sort();
    orphan_candidates.dedup();
    remove_orphan_entities(executor, &orphan_candidates).await?;
    for entry in &write.journal {
        if !applied.describes(entry.memory_id) {
            continue;
        }
        sqlx::query("insert into history_journal (id, tenant, memory_id, created_at, payload) values (?, ?, ?, ?, ?)")
            .bind(entry.id.to_string())
            .bind(&entry.tenant)
            .bind(entry.memory_id.map(|id| id.to_string()))
            .bind(micros(entry.created_at))
            .bind(entry.payload.to_string())
            .execute(&mut *executor)
            .await?;
    }
    settle_in(executor, &write.settle).await?;
    Ok((applied, restated))
}

pub(super) async fn settle_in(executor: &mut sqlx::SqliteConnection, ids: &[Uuid]) -> Result<()> {
    for chunk in ids.chunks(FETCH_CHUNK) {
        let placeholders = vec!["?"; chunk.len()].join(", ");
        let statement = format!("delete from history_journal where id in ({placeholders})");
        let mut settle = sqlx::query(&statement);
        for id in chunk {
            settle = settle.bind(id.to_string());
        }
        settle.execute(&mut *executor).await?;
    }
    Ok(())
}

pub(super) async fn update_one(executor: &mut sqlx::SqliteConnection, record: &MemoryRecord) -> Result<()> {
    let metadata = serde_json::Value::Object(record.metadata.clone()).to_string();
    let update = sqlx::query(
        "update memories set memory = ?, hash = ?, metadata = ?, created_at = ?, updated_at = ?, \
         expiration_date = ?, text_lemmatized = ?, doc_len = ?, entities = ?, embedding = ?, source_type = ?, \
         source_actor = ?, source_app = ?, evidence_ref = ?, confidence = ?, state_key = ?, status = ?, \
         superseded_by = ?, valid_to = ?, event_time = ? where tenant = ? and id = ?",
    )
    .bind(&record.memory)
    .bind(&record.hash)
    .bind(metadata)
    .bind(micros(record.created_at))
    .bind(micros(record.updated_at))
    .bind(record.expiration_date.map(|date| date.format("%Y-%m-%d").to_string()))
    .bind(&record.text_lemmatized)
    .bind(doc_len(&record.text_lemmatized))
    .bind(serde_json::to_string(&record.entities).unwrap_or_else(|_| "[]".to_owned()))
    .bind(encode_embedding(&record.embedding));
    bind_provenance_and_state(update, record)
        .bind(&record.tenant)
        .bind(record.id.to_string())
        .execute(&mut *executor)
        .await?;
    write_terms(executor, record).await
}

/// The entity links of `memory_ids` with everything needed to link them again.
pub(super) async fn load_links(
    executor: &mut sqlx::SqliteConnection,
    memory_ids: &[String],
) -> Result<Vec<EntityLink>> {
    let mut links = Vec::new();
    for chunk in memory_ids.chunks(FETCH_CHUNK) {
        let placeholders = vec!["?"; chunk.len()].join(", ");
        let statement = format!(
            "select l.memory_id, e.tenant, e.user_id, e.agent_id, e.run_id, e.entity, e.normalized, e.entity_type, \
             e.embedding from memory_entity_links l join memories_entities e on e.id = l.entity_id \
             where l.memory_id in ({placeholders})"
        );
        let mut query = sqlx::query(&statement);
        for id in chunk {
            query = query.bind(id);
        }
        for row in query.fetch_all(&mut *executor).await? {
            let memory_id: String = row.try_get(0)?;
            let bytes: &[u8] = row.try_get(8)?;
            links.push(EntityLink {
                memory_id: Uuid::parse_str(&memory_id)
                    .map_err(|error| Error::Internal(format!("stored id {memory_id}: {error}")))?,
                tenant: row.try_get(1)?,
                scope: Scope { user_id: row.try_get(2)?, agent_id: row.try_get(3)?, run_id: row.try_get(4)? },
                name: row.try_get(5)?,
                normalized: row.try_get(6)?,
                kind: row.try_get(7)?,
                embedding: decode_embedding(bytes),
            });
        }
    }
    Ok(links)
}

/// Links memories to the entity rows of their scope: the row with the same normalised name, else
/// the most similar one at or above `merge_threshold`, else a new row. Writers are serialised by
/// `BEGIN IMMEDIATE`, so reading the scope's rows and inserting is race-free; the unique index on
/// (tenant, scope, normalised name) holds anyway.
pub(super) async fn add_links(
    executor: &mut sqlx::SqliteConnection,
    links: &[EntityLink],
    merge_threshold: f32,
) -> Result<()> {
    // Entity rows of each scope, loaded once per write.
    let mut loaded: HashMap<(String, Scope), ScopeEntities> = HashMap::new();
    for link in links {
        let key = (link.tenant.clone(), link.scope.clone());
        if !loaded.contains_key(&key) {
            let rows = scope_entities(executor, &link.tenant, &link.scope, true).await?;
            loaded.insert(key.clone(), rows);
        }
        let rows = loaded.get_mut(&key).ok_or_else(|| Error::Internal("entity cache".into()))?;
        let same_name = rows.iter().find(|(_, normalized, _)| *normalized == link.normalized).map(|row| row.0.clone());
        let similar = || {
            rows.iter()
                .map(|(id, _, embedding)| (id, cosine(embedding, &link.embedding)))
                .filter(|(_, similarity)| *similarity >= merge_threshold)
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .map(|(id, _)| id.clone())
        };
        let entity_id = match same_name.or_else(similar) {
            Some(id) => id,
            None => {
                let id = Uuid::now_v7().to_string();
                sqlx::query(
                    "insert into memories_entities (id, tenant, user_id, agent_id, run_id, entity, normalized, \
                     entity_type, embedding) values (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                )
                .bind(&id)
                .bind(&link.tenant)
                .bind(&link.scope.user_id)
                .bind(&link.scope.agent_id)
                .bind(&link.scope.run_id)
                .bind(&link.name)
                .bind(&link.normalized)
                .bind(&link.kind)
                .bind(encode_embedding(&link.embedding))
                .execute(&mut *executor)
                .await?;
                rows.push((id.clone(), link.normalized.clone(), link.embedding.clone()));
                id
            }
        };
        sqlx::query("insert or ignore into memory_entity_links (memory_id, entity_id) values (?, ?)")
            .bind(link.memory_id.to_string())
            .bind(&entity_id)
            .execute(&mut *executor)
            .await?;
    }
    Ok(())
}
