//! Small state files written whole and atomically (write a temporary file, sync it, rename it
//! over the old one, sync the directory): the snapshot of the known state and watch
//! positions, and the sinks' acknowledged sequence numbers.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::log::sync_dir;
use super::{StoreError, io};
use crate::model::KnownObject;

/// The state after every log record below `next_seq`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub next_seq: u64,
    pub known: Vec<KnownObject>,
    /// Watch position per scope (its stored label, [`crate::classify::Scope::stored`]:
    /// `None` for Pods in all namespaces); `None` position: list again.
    pub positions: Vec<(Option<String>, Option<String>)>,
    /// With routes or alert rules: the routes' marks and the open alert episodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing: Option<crate::route::engine::RouterSnapshot>,
}

/// Per sink, the highest sequence number it acknowledged (all below it are settled too).
pub type Cursors = BTreeMap<String, u64>;

pub const SNAPSHOT: &str = "snapshot.json";
pub const CURSORS: &str = "cursors.json";

/// Writes `value` to `dir/name` atomically.
pub fn write<T: Serialize>(dir: &Path, name: &str, value: &T) -> Result<(), StoreError> {
    let path = dir.join(name);
    let tmp = dir.join(format!("{name}.tmp"));
    let bytes = serde_json::to_vec(value).map_err(|e| StoreError::Io {
        op: "encoding",
        path: path.clone(),
        source: std::io::Error::other(e),
    })?;
    let mut f = std::fs::File::create(&tmp).map_err(io("creating", &tmp))?;
    f.write_all(&bytes).map_err(io("writing", &tmp))?;
    f.sync_all().map_err(io("syncing", &tmp))?;
    std::fs::rename(&tmp, &path).map_err(io("renaming", &tmp))?;
    sync_dir(dir)
}

/// Reads `dir/name`; `None` if it does not exist.
pub fn read<T: for<'de> Deserialize<'de>>(dir: &Path, name: &str) -> Result<Option<T>, StoreError> {
    let path = dir.join(name);
    match std::fs::read(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(StoreError::Io {
            op: "reading",
            path,
            source,
        }),
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| StoreError::Corrupt {
                path,
                offset: e.column() as u64,
                reason: e.to_string(),
            }),
    }
}
