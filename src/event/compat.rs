//! Compatibility shapes: the attributes another event source gives the same change, so that
//! the consumers written for it keep matching when kubecast replaces it. Entry point:
//! [`Compat`] (the config's value, in `vocab`; its shaping here), set on an event by the sink
//! that sends it (`compat:` on a sink or a route).
//!
//! `apiserversource` is Knative Eventing's ApiServerSource: types
//! `dev.knative.apiserver.resource.add|update|delete` (`dev.knative.apiserver.ref.*` when
//! `data` is a reference) and the extensions `kind`, `apiversion`, `name` and `namespace`.
//! kubecast's own id, source, subject and extensions stay as they are.

use std::borrow::Cow;

use super::Event;
use crate::model::ChangeKind;
pub use crate::vocab::Compat;

impl Compat {
    /// The `type` of `event` in this shape; `None` keeps kubecast's (alert events).
    pub fn event_type(self, event: &Event) -> Option<&'static str> {
        let Compat::Apiserversource = self;
        let reference = event.truncated || event.dataschema.contains("-reference:");
        Some(match (event.kind, reference) {
            (ChangeKind::Added, false) => "dev.knative.apiserver.resource.add",
            (ChangeKind::Modified, false) => "dev.knative.apiserver.resource.update",
            (ChangeKind::Deleted, false) => "dev.knative.apiserver.resource.delete",
            (ChangeKind::Added, true) => "dev.knative.apiserver.ref.add",
            (ChangeKind::Modified, true) => "dev.knative.apiserver.ref.update",
            (ChangeKind::Deleted, true) => "dev.knative.apiserver.ref.delete",
            (ChangeKind::AlertFiring | ChangeKind::AlertResolved, _) => return None,
        })
    }

    /// The extensions this shape adds to `event`'s own.
    pub fn extensions(self, event: &Event) -> [(&'static str, Cow<'_, str>); 4] {
        let Compat::Apiserversource = self;
        [
            ("kind", Cow::Borrowed(&*event.k8s_kind)),
            ("apiversion", Cow::Borrowed(&*event.api_version)),
            ("name", Cow::Borrowed(event.object.name.as_str())),
            ("namespace", Cow::Borrowed(&*event.object.namespace)),
        ]
    }
}
