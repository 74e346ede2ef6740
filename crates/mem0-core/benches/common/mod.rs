//! What several benchmarks share (each bench is its own crate: `mod common;`).

// Each bench uses part of it.
#![allow(dead_code)]

/// CPU seconds (user + system) of the processes whose `/proc/<pid>/stat` passes `select`
/// (`pid`, process name): this process, or every `postgres` process on the machine.
pub fn cpu_seconds(select: impl Fn(u32, &str) -> bool) -> f64 {
    let ticks_per_second = 100.0; // USER_HZ on Linux
    let mut total = 0_u64;
    let Ok(entries) = std::fs::read_dir("/proc") else { return 0.0 };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let Some((head, tail)) = stat.rsplit_once(')') else { continue };
        let name = head.split_once('(').map_or("", |(_, name)| name);
        if !select(pid, name) {
            continue;
        }
        let fields: Vec<&str> = tail.split_whitespace().collect();
        // After the name: state is field 3, utime 14 and stime 15 (1-based in proc(5)).
        if let (Some(user), Some(system)) = (fields.get(11), fields.get(12)) {
            total += user.parse::<u64>().unwrap_or(0) + system.parse::<u64>().unwrap_or(0);
        }
    }
    total as f64 / ticks_per_second
}

/// A search of `user`'s memories for `query` in `mode`, the top 10, defaults otherwise.
pub fn search_request(user: &str, query: String, mode: mem0_core::memory::SearchMode) -> mem0_core::SearchRequest {
    mem0_core::SearchRequest {
        scope: mem0_core::Scope { user_id: Some(user.to_owned()), agent_id: None, run_id: None },
        filter: None,
        query,
        top_k: 10,
        threshold: 0.0,
        show_expired: false,
        include_superseded: false,
        temporal: false,
        reference_time: None,
        decay: None,
        mode,
        explain: false,
        rerank: false,
    }
}
