//! Writes of the Postgres store, inside one transaction: memory rows (the keyword index is a
//! generated column), entity rows and links, the history journal.

use pgvector::Vector;
use sqlx::Row;
use uuid::Uuid;

use super::codec::row_to_record;
use super::COLUMNS;
use crate::error::{Error, Result};
use crate::scope::Scope;
use crate::state::resolve;
use crate::store::sql::{where_clause, Postgres as Pg};
use crate::store::{
    dedup_lock_key, doc_len, links_to_write, without_known, Applied, EntityLink, ScopedQuery, WriteSet,
};
use crate::types::{HistoryRecord, MemoryRecord};

/// Takes a transaction lock per state key of the write, in key order, before the write changes
/// any row: concurrent writers of one key (replicas too) then run one after the other and each
/// resolves the chain with the others' rows committed. (Taken after the row changes, two writers
/// each holding a row the other's resolution updates deadlocked: found by the conformance case
/// `concurrent_writers_of_one_key`.)
async fn lock_state_keys(executor: &mut sqlx::PgConnection, write: &WriteSet) -> Result<()> {
    for key in crate::store::keys_to_resolve(write) {
        let id = |value: &Option<String>| value.clone().unwrap_or_default();
        let lock = format!(
            "state\n{}\n{}\n{}\n{}\n{}",
            key.tenant,
            id(&key.scope.user_id),
            id(&key.scope.agent_id),
            id(&key.scope.run_id),
            key.key
        );
        sqlx::query("select pg_advisory_xact_lock(hashtextextended($1, 0))").bind(lock).execute(&mut *executor).await?;
    }
    Ok(())
}

/// Resolves the chains of the write's state keys again (under the locks [`lock_state_keys`]
/// took at the start of the transaction).
async fn resolve_states(executor: &mut sqlx::PgConnection, write: &WriteSet) -> Result<()> {
    for key in crate::store::keys_to_resolve(write) {
        let rows = sqlx::query(
            "select id, status, coalesce(event_time, created_at) as t, confidence, source_type, superseded_by, \
             valid_to from memories where tenant = $1 and state_key = $2 and user_id is not distinct from $3 \
             and agent_id is not distinct from $4 and run_id is not distinct from $5",
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
                crate::store::state_row(
                    row.try_get("id")?,
                    row.try_get("status")?,
                    row.try_get("t")?,
                    row.try_get("confidence")?,
                    row.try_get("source_type")?,
                    row.try_get("superseded_by")?,
                    row.try_get("valid_to")?,
                )
            })
            .collect::<Result<Vec<_>>>()?;
        for change in resolve(&chain) {
            sqlx::query("update memories set status = $1, superseded_by = $2, valid_to = $3 where id = $4")
                .bind(change.status.as_str())
                .bind(change.superseded_by)
                .bind(change.valid_to)
                .bind(change.id)
                .execute(&mut *executor)
                .await?;
        }
    }
    Ok(())
}

/// Removes those of `entity_ids` that no memory links to any more.
pub(super) async fn remove_orphan_entities(executor: &mut sqlx::PgConnection, entity_ids: &[Uuid]) -> Result<()> {
    if entity_ids.is_empty() {
        return Ok(());
    }
    // Lock the candidates first: a concurrent link to one of them holds a key-share lock until it
    // commits, and the delete below (a new statement, so a new snapshot) then sees that link.
    sqlx::query("select id from memories_entities where id = any($1) order by id for update")
        .bind(entity_ids)
        .fetch_all(&mut *executor)
        .await?;
    sqlx::query(
        "delete from memories_entities e where e.id = any($1) \
         and not exists (select 1 from memory_entity_links l where l.entity_id = e.id)",
    )
    .bind(entity_ids)
    .execute(&mut *executor)
    .await?;
    Ok(())
}

/// Hashes among `hashes` that memories matching `query` already have, read under a transaction
/// lock on the query's tenant and scope: a concurrent writer of the same scope (another replica)
/// waits here until this transaction ends, then sees what it committed.
async fn known_hashes(
    executor: &mut sqlx::PgConnection,
    query: &ScopedQuery,
    hashes: &[String],
) -> Result<std::collections::HashSet<String>> {
    sqlx::query("select pg_advisory_xact_lock(hashtextextended($1, 0))")
        .bind(dedup_lock_key(query))
        .execute(&mut *executor)
        .await?;
    let (sql, binds) = where_clause(Pg, query, 1).into_parts();
    let statement = format!("select distinct hash from memories where {sql} and hash = any(${})", binds.len() + 1);
    let rows = super::bind_all(sqlx::query(&statement), &binds).bind(hashes).fetch_all(&mut *executor).await?;
    rows.iter().map(|row| Ok(row.try_get("hash")?)).collect()
}

/// Applies a write inside an open transaction (see [`WriteSet`] for the order).
pub(super) async fn apply_in(executor: &mut sqlx::PgConnection, write: &WriteSet) -> Result<Applied> {
    lock_state_keys(executor, write).await?;
    let mut applied = Applied::default();
    for (id, expected) in &write.expect {
        let current: Option<chrono::DateTime<chrono::Utc>> =
            sqlx::query_scalar("select updated_at from memories where id = $1 for update")
                .bind(id)
                .fetch_optional(&mut *executor)
                .await?;
        if current != Some(*expected) {
            return Err(Error::Conflict(format!("memory {id} changed meanwhile")));
        }
    }
    let touched: Vec<Uuid> = write.relink.iter().chain(&write.delete).copied().collect();
    if !touched.is_empty() {
        applied.previous_links = load_links(executor, &touched).await?;
    }
    let orphan_candidates: Vec<Uuid> = if touched.is_empty() {
        Vec::new()
    } else {
        sqlx::query_scalar("select distinct entity_id from memory_entity_links where memory_id = any($1)")
            .bind(&touched)
            .fetch_all(&mut *executor)
            .await?
    };
    if !write.delete.is_empty() {
        let rows = sqlx::query(&format!("delete from memories where tenant = $1 and id = any($2) returning {COLUMNS}"))
            .bind(&write.tenant)
            .bind(&write.delete)
            .fetch_all(&mut *executor)
            .await?;
        applied.deleted = rows.iter().map(row_to_record).collect::<Result<Vec<_>>>()?;
    }
    applied.missing =
        write.delete.iter().filter(|id| !applied.deleted.iter().any(|record| record.id == **id)).copied().collect();
    if let (Some(missing), false) = (applied.missing.first(), write.skip_missing) {
        return Err(Error::MemoryNotFound { id: missing.to_string() });
    }
    for record in &write.update {
        let previous = sqlx::query(&format!("select {COLUMNS} from memories where tenant = $1 and id = $2 for update"))
            .bind(&record.tenant)
            .bind(record.id)
            .fetch_optional(&mut *executor)
            .await?
            .ok_or_else(|| Error::MemoryNotFound { id: record.id.to_string() })?;
        applied.replaced.push(row_to_record(&previous)?);
        update_one(executor, record).await?;
    }
    let inserts = match &write.unique_in {
        Some(query) => {
            let hashes: Vec<String> = write.insert.iter().map(|record| record.hash.clone()).collect();
            let (kept, skipped) = without_known(write, &known_hashes(executor, query, &hashes).await?);
            applied.skipped = skipped;
            std::borrow::Cow::Owned(kept)
        }
        None => std::borrow::Cow::Borrowed(&write.insert),
    };
    let inserts = if write.skip_existing_ids && !inserts.is_empty() {
        // Concurrent imports of one file take turns here, so the second sees the first's rows
        // (rather than failing on the primary key).
        sqlx::query("select pg_advisory_xact_lock(hashtextextended('import-ids', 0))").execute(&mut *executor).await?;
        let ids: Vec<Uuid> = inserts.iter().map(|record| record.id).collect();
        let existing: std::collections::HashSet<Uuid> =
            sqlx::query_scalar("select id from memories where id = any($1)")
                .bind(&ids)
                .fetch_all(&mut *executor)
                .await?
                .into_iter()
                .collect();
        let (kept, skipped) = crate::store::without_ids(inserts.into_owned(), &existing);
        applied.skipped.extend(skipped);
        std::borrow::Cow::Owned(kept)
    } else {
        inserts
    };
    insert_rows(executor, &inserts).await?;
    resolve_states(executor, write).await?;
    if !write.relink.is_empty() {
        sqlx::query("delete from memory_entity_links where memory_id = any($1)")
            .bind(&write.relink)
            .execute(&mut *executor)
            .await?;
    }
    add_links(executor, &links_to_write(write, &applied.skipped), write.merge_threshold).await?;
    remove_orphan_entities(executor, &orphan_candidates).await?;
    for entry in &write.journal {
        if !applied.describes(entry.memory_id) {
            continue;
        }
        sqlx::query(
            "insert into history_journal (id, tenant, memory_id, created_at, payload) values ($1, $2, $3, $4, $5)",
        )
        .bind(entry.id)
        .bind(&entry.tenant)
        .bind(entry.memory_id)
        .bind(entry.created_at)
        .bind(&entry.payload)
        .execute(&mut *executor)
        .await?;
    }
    if !write.settle.is_empty() {
        sqlx::query("delete from history_journal where id = any($1)")
            .bind(&write.settle)
            .execute(&mut *executor)
            .await?;
    }
    if !write.history.is_empty() || !write.messages.is_empty() {
        let history: Vec<HistoryRecord> =
            write.history.iter().filter(|record| applied.describes(Some(record.memory_id))).cloned().collect();
        crate::history::deliver_postgres(executor, &history, &write.messages).await?;
    }
    Ok(applied)
}

/// Multi-row inserts: one round trip per 500 rows.
///
/// Rows go in by scope: each row's trigger updates its scope's `keyword_stats` row, and two
/// writers inserting memories of the same scopes in different orders would each hold a row the
/// other waits for (a deadlock Postgres breaks by failing one write).
pub(super) async fn insert_rows(executor: &mut sqlx::PgConnection, records: &[MemoryRecord]) -> Result<()> {
    const COLUMN_COUNT: usize = 30;
    let mut records: Vec<&MemoryRecord> = records.iter().collect();
    records.sort_by(|a, b| {
        (&a.tenant, &a.scope.user_id, &a.scope.agent_id, &a.scope.run_id).cmp(&(
            &b.tenant,
            &b.scope.user_id,
            &b.scope.agent_id,
            &b.scope.run_id,
        ))
    });
    for chunk in records.chunks(500) {
        let rows: Vec<String> = (0..chunk.len())
            .map(|row| {
                let placeholders: Vec<String> =
                    (1..=COLUMN_COUNT).map(|column| format!("${}", row * COLUMN_COUNT + column)).collect();
                format!("({})", placeholders.join(", "))
            })
            .collect();
        let statement = format!("insert into memories ({COLUMNS}) values {}", rows.join(", "));
        let mut query = sqlx::query(&statement);
        for record in chunk {
            query = query
                .bind(record.id)
                .bind(&record.tenant)
                .bind(&record.scope.user_id)
                .bind(&record.scope.agent_id)
                .bind(&record.scope.run_id)
                .bind(&record.memory)
                .bind(&record.hash)
                .bind(serde_json::Value::Object(record.metadata.clone()))
                .bind(record.created_at)
                .bind(record.updated_at)
                .bind(record.expiration_date)
                .bind(&record.attributed_to)
                .bind(&record.role)
                .bind(&record.actor_id)
                .bind(&record.memory_type)
                .bind(&record.linked_memory_ids)
                .bind(&record.entities)
                .bind(&record.text_lemmatized)
                .bind(i32::try_from(doc_len(&record.text_lemmatized)).unwrap_or(i32::MAX))
                .bind(Vector::from(record.embedding.to_vec()));
            query = bind_provenance_and_state(query, record);
        }
        query.execute(&mut *executor).await?;
    }
    Ok(())
}

pub(super) async fn update_one(executor: &mut sqlx::PgConnection, record: &MemoryRecord) -> Result<()> {
    let update = sqlx::query(
        "update memories set memory = $1, hash = $2, metadata = $3, created_at = $4, updated_at = $5, \
         expiration_date = $6, embedding = $7, text_lemmatized = $10, doc_len = $11, entities = $12, \
         source_type = $13, source_actor = $14, source_app = $15, evidence_ref = $16, confidence = $17, \
         state_key = $18, status = $19, superseded_by = $20, valid_to = $21, event_time = $22 \
         where tenant = $8 and id = $9",
    )
    .bind(&record.memory)
    .bind(&record.hash)
    .bind(serde_json::Value::Object(record.metadata.clone()))
    .bind(record.created_at)
    .bind(record.updated_at)
    .bind(record.expiration_date)
    .bind(Vector::from(record.embedding.to_vec()))
    .bind(&record.tenant)
    .bind(record.id)
    .bind(&record.text_lemmatized)
    .bind(i32::try_from(doc_len(&record.text_lemmatized)).unwrap_or(i32::MAX))
    .bind(&record.entities);
    bind_provenance_and_state(update, record).execute(&mut *executor).await?;
    Ok(())
}

/// Binds a record's provenance and state columns, in the order of [`COLUMNS`] (and of the update
/// statement's last placeholders).
fn bind_provenance_and_state<'q>(
    query: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    record: &'q MemoryRecord,
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    query
        .bind(record.provenance.source_type.as_str())
        .bind(&record.provenance.source_actor)
        .bind(&record.provenance.source_app)
        .bind(&record.provenance.evidence_ref)
        .bind(record.provenance.stored_confidence())
        .bind(&record.state.state_key)
        .bind(record.state.status.as_str())
        .bind(record.state.superseded_by)
        .bind(record.state.valid_to)
        .bind(record.state.event_time)
}

/// The entity links of `memory_ids` with everything needed to link them again.
pub(super) async fn load_links(executor: &mut sqlx::PgConnection, memory_ids: &[Uuid]) -> Result<Vec<EntityLink>> {
    let rows = sqlx::query(
        "select l.memory_id, e.tenant, e.user_id, e.agent_id, e.run_id, e.entity, e.normalized, e.entity_type, \
         e.embedding from memory_entity_links l join memories_entities e on e.id = l.entity_id \
         where l.memory_id = any($1)",
    )
    .bind(memory_ids)
    .fetch_all(&mut *executor)
    .await?;
    rows.iter()
        .map(|row| {
            let embedding: Vector = row.try_get(8)?;
            Ok(EntityLink {
                memory_id: row.try_get(0)?,
                tenant: row.try_get(1)?,
                scope: Scope { user_id: row.try_get(2)?, agent_id: row.try_get(3)?, run_id: row.try_get(4)? },
                name: row.try_get(5)?,
                normalized: row.try_get(6)?,
                kind: row.try_get(7)?,
                embedding: embedding.to_vec(),
            })
        })
        .collect()
}

/// Links memories to the entity rows of their scope: the row with the same normalised name, else
/// the most similar one at or above `merge_threshold`, else a new row. New rows are inserted with
/// `on conflict do nothing` against the unique index on (tenant, scope, normalised name), so two
/// writers naming the same new entity at once end up with one row (the loser reads the winner's).
///
/// The rows named like the links are read in one statement per scope, and the links inserted in
/// one statement: a write naming twenty entities made forty round trips before; now those whose
/// name is known cost none of their own (new names still look for a similar row and insert).
pub(super) async fn add_links(
    executor: &mut sqlx::PgConnection,
    links: &[EntityLink],
    merge_threshold: f32,
) -> Result<()> {
    const SCOPE: &str = "tenant = $1 and user_id is not distinct from $2 and agent_id is not distinct from $3 \
                         and run_id is not distinct from $4";
    if links.is_empty() {
        return Ok(());
    }
    let same_name_statement =
        format!("select id from memories_entities where {SCOPE} and normalized = $5 limit 1 for key share");
    // The entity row of each (tenant, scope, normalised name) known so far: read, or inserted below.
    let mut by_name: std::collections::HashMap<(&str, &Scope, &str), Uuid> = std::collections::HashMap::new();
    let mut scopes: Vec<(&str, &Scope)> = Vec::new();
    for link in links {
        if !scopes.contains(&(link.tenant.as_str(), &link.scope)) {
            scopes.push((link.tenant.as_str(), &link.scope));
        }
    }
    for (tenant, scope) in scopes {
        let mut names: Vec<&str> = links
            .iter()
            .filter(|link| link.tenant == tenant && link.scope == *scope)
            .map(|link| link.normalized.as_str())
            .collect();
        names.sort_unstable();
        names.dedup();
        let rows = sqlx::query(&format!(
            "select normalized, id from memories_entities where {SCOPE} and normalized = any($5) for key share"
        ))
        .bind(tenant)
        .bind(&scope.user_id)
        .bind(&scope.agent_id)
        .bind(&scope.run_id)
        .bind(&names)
        .fetch_all(&mut *executor)
        .await?;
        for row in rows {
            let normalized: String = row.try_get("normalized")?;
            let id: Uuid = row.try_get("id")?;
            if let Some(name) = names.iter().find(|name| **name == normalized) {
                by_name.entry((tenant, scope, name)).or_insert(id);
            }
        }
    }
    let (mut memory_ids, mut entity_ids) = (Vec::with_capacity(links.len()), Vec::with_capacity(links.len()));
    for link in links {
        let key = (link.tenant.as_str(), &link.scope, link.normalized.as_str());
        let mut entity_id = by_name.get(&key).copied();
        let vector = Vector::from(link.embedding.clone());
        if entity_id.is_none() {
            let nearest = sqlx::query(&format!(
                "select id, (embedding <=> $5)::float8 as distance from memories_entities where {SCOPE} \
                 order by embedding <=> $5 limit 1 for key share"
            ))
            .bind(&link.tenant)
            .bind(&link.scope.user_id)
            .bind(&link.scope.agent_id)
            .bind(&link.scope.run_id)
            .bind(&vector)
            .fetch_optional(&mut *executor)
            .await?;
            if let Some(row) = nearest {
                let distance: f64 = row.try_get("distance")?;
                if 1.0 - distance >= f64::from(merge_threshold) {
                    entity_id = Some(row.try_get("id")?);
                }
            }
        }
        if entity_id.is_none() {
            let inserted: Option<Uuid> = sqlx::query_scalar(
                "insert into memories_entities (id, tenant, user_id, agent_id, run_id, entity, normalized, \
                 entity_type, embedding) values ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
                 on conflict (tenant, coalesce(user_id, ''), coalesce(agent_id, ''), coalesce(run_id, ''), normalized) \
                 where normalized <> '' do nothing returning id",
            )
            .bind(Uuid::now_v7())
            .bind(&link.tenant)
            .bind(&link.scope.user_id)
            .bind(&link.scope.agent_id)
            .bind(&link.scope.run_id)
            .bind(&link.name)
            .bind(&link.normalized)
            .bind(&link.kind)
            .bind(&vector)
            .fetch_optional(&mut *executor)
            .await?;
            let id = match inserted {
                Some(id) => id,
                // A concurrent writer created the row first; it is committed now (the insert waited).
                None => entity_by_name(executor, &same_name_statement, link).await?.ok_or_else(|| {
                    Error::Internal(format!("entity `{}` neither inserted nor found", link.normalized))
                })?,
            };
            // Later links with this name find the row by name, as a read would now.
            by_name.insert(key, id);
            entity_id = Some(id);
        }
        if let Some(id) = entity_id {
            memory_ids.push(link.memory_id);
            entity_ids.push(id);
        }
    }
    sqlx::query(
        "insert into memory_entity_links (memory_id, entity_id) \
         select * from unnest($1::uuid[], $2::uuid[]) on conflict do nothing",
    )
    .bind(&memory_ids)
    .bind(&entity_ids)
    .execute(&mut *executor)
    .await?;
    Ok(())
}

pub(super) async fn entity_by_name(
    executor: &mut sqlx::PgConnection,
    statement: &str,
    link: &EntityLink,
) -> Result<Option<Uuid>> {
    Ok(sqlx::query_scalar::<_, Uuid>(statement)
        .bind(&link.tenant)
        .bind(&link.scope.user_id)
        .bind(&link.scope.agent_id)
        .bind(&link.scope.run_id)
        .bind(&link.normalized)
        .fetch_optional(executor)
        .await?)
}
