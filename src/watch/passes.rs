//! Which items a scope's list or watch passes on to the pipeline. Entry point: [`passes`].

use super::Observed;
use super::source::WatchSettings;

/// Whether `item`, read in scope `label`, goes on: with `sharding`, an object only when its uid
/// hashes into the shard's range (the apiserver may send every object); after a change of
/// shard count, a watch event only when the earlier shard that held its object had not
/// published it yet (above its floor).
pub(super) fn passes(settings: &WatchSettings, label: &str, item: &Observed) -> bool {
    let object = match item {
        Observed::Listed { object, .. }
        | Observed::Applied { object, .. }
        | Observed::Deleted { object, .. } => object,
        _ => return true,
    };
    let in_shard = settings.shard.is_none_or(|s| s.contains(&object.uid));
    let new = match (&settings.floors, item) {
        (Some(f), Observed::Applied { .. } | Observed::Deleted { .. }) => {
            f.passes(label, &object.uid, &object.rv)
        }
        _ => true,
    };
    in_shard && new
}
