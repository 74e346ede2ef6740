//! Rebuilds the crate when a migration is added or changed: `sqlx::migrate!` embeds the
//! migrations directory at compile time, and Cargo does not watch it otherwise.

fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}
