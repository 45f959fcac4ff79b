//! Least privilege that follows the config: the RBAC objects a kubecast with a given config
//! needs, exactly `list` and `watch` on each configured resource (a ClusterRole, or Roles in
//! the listed namespaces when every resource is namespaced and namespaces are listed), plus
//! the Lease rules when leader election is on. Entry point: [`render`], printed by
//! `kubecast rbac --config FILE`.

use std::collections::BTreeMap;
use std::fmt::Write;

/// One resource to grant: its API group (empty for core) and plural, where it is watched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub group: String,
    pub plural: String,
    pub namespaced: bool,
    /// Namespaces it is watched in; empty: all.
    pub namespaces: Vec<String>,
}

/// Who gets the rights, and the Lease if leader election is on.
#[derive(Debug, Clone)]
pub struct Subject {
    /// The ServiceAccount's name and namespace.
    pub service_account: String,
    pub namespace: String,
    /// The name of the objects (`kubecast`).
    pub name: String,
    /// With leader election: the Lease's name and namespace.
    pub lease: Option<(String, String)>,
    /// `sharding.shards`: above 1, the shard Leases (`{lease}-shard-{i}`) and the members'
    /// record (`{lease}-members`) are granted beside the Lease.
    pub shards: u32,
}

/// The YAML stream of the objects: ClusterRole and ClusterRoleBinding, or a Role and a
/// RoleBinding per namespace; then the leader election Role and RoleBinding.
pub fn render(grants: &[Grant], who: &Subject) -> String {
    let mut docs = Vec::new();
    let per_namespace = !grants.is_empty()
        && grants
            .iter()
            .all(|g| g.namespaced && !g.namespaces.is_empty());
    if per_namespace {
        let mut by_ns: BTreeMap<&str, Vec<&Grant>> = BTreeMap::new();
        for g in grants {
            for ns in &g.namespaces {
                by_ns.entry(ns).or_default().push(g);
            }
        }
        for (ns, gs) in by_ns {
            let rules = rules(&gs.into_iter().cloned().collect::<Vec<_>>());
            docs.push(role(
                "Role",
                &who.name,
                Some(ns),
                &rules,
                "list and watch what kubecast watches in this namespace",
            ));
            docs.push(binding("RoleBinding", &who.name, Some(ns), "Role", who));
        }
    } else {
        docs.push(role(
            "ClusterRole",
            &who.name,
            None,
            &rules(grants),
            "list and watch what kubecast watches, nothing else: no get, no writes",
        ));
        docs.push(binding(
            "ClusterRoleBinding",
            &who.name,
            None,
            "ClusterRole",
            who,
        ));
    }
    if let Some((lease, ns)) = &who.lease {
        let name = format!("{}-leader-election", who.name);
        let mut names = vec![quote(lease)];
        if who.shards > 1 {
            names.push(quote(&format!("{lease}-members")));
            names.extend((0..who.shards).map(|i| quote(&format!("{lease}-shard-{i}"))));
        }
        let rules = format!(
            "  - apiGroups: [\"coordination.k8s.io\"]\n    resources: [\"leases\"]\n    resourceNames: [{}]\n    verbs: [\"get\", \"update\"]\n  - apiGroups: [\"coordination.k8s.io\"]\n    resources: [\"leases\"]\n    verbs: [\"create\"]\n",
            names.join(", ")
        );
        let why = if who.shards > 1 {
            "leader election with shards: read and renew the shards' Leases and the members' record, nothing else (create cannot be limited to a name)"
        } else {
            "leader election: read and renew the one Lease (create cannot be limited to a name)"
        };
        docs.push(role("Role", &name, Some(ns), &rules, why));
        docs.push(binding("RoleBinding", &name, Some(ns), "Role", who));
    }
    docs.join("---\n")
}

/// The rules of `grants`: one per API group, its resources sorted, verbs list and watch.
fn rules(grants: &[Grant]) -> String {
    let mut by_group: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for g in grants {
        let list = by_group.entry(&g.group).or_default();
        if !list.contains(&g.plural.as_str()) {
            list.push(&g.plural);
        }
    }
    let mut out = String::new();
    for (group, mut plurals) in by_group {
        plurals.sort_unstable();
        let resources: Vec<String> = plurals.iter().map(|p| quote(p)).collect();
        // Writing to a String cannot fail.
        let _ = write!(
            out,
            "  - apiGroups: [{}]\n    resources: [{}]\n    verbs: [\"list\", \"watch\"]\n",
            quote(group),
            resources.join(", ")
        );
    }
    out
}

fn role(kind: &str, name: &str, ns: Option<&str>, rules: &str, why: &str) -> String {
    format!(
        "# {why}\napiVersion: rbac.authorization.k8s.io/v1\nkind: {kind}\nmetadata:\n  name: {}\n{}rules:\n{rules}",
        quote(name),
        ns.map(|n| format!("  namespace: {}\n", quote(n)))
            .unwrap_or_default()
    )
}

fn binding(kind: &str, name: &str, ns: Option<&str>, role_kind: &str, who: &Subject) -> String {
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: {kind}\nmetadata:\n  name: {}\n{}roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: {role_kind}\n  name: {}\nsubjects:\n  - kind: ServiceAccount\n    name: {}\n    namespace: {}\n",
        quote(name),
        ns.map(|n| format!("  namespace: {}\n", quote(n)))
            .unwrap_or_default(),
        quote(name),
        quote(&who.service_account),
        quote(&who.namespace)
    )
}

/// A YAML double-quoted string (JSON's quoting is valid YAML).
fn quote(s: &str) -> String {
    // A string always serializes.
    serde_json::to_string(s).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(group: &str, plural: &str, namespaced: bool, ns: &[&str]) -> Grant {
        Grant {
            group: group.into(),
            plural: plural.into(),
            namespaced,
            namespaces: ns.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn who(lease: bool) -> Subject {
        Subject {
            service_account: "kubecast".into(),
            namespace: "kubecast".into(),
            name: "kubecast".into(),
            lease: lease.then(|| ("kubecast".into(), "kubecast".into())),
            shards: 1,
        }
    }

    #[test]
    fn with_shards_the_lease_role_names_each_shard_lease_and_the_members_record() {
        let mut sharded = who(true);
        sharded.shards = 3;
        let out = render(&[grant("", "pods", true, &[])], &sharded);
        let d = docs(&out);
        let role = d
            .iter()
            .find(|o| o["metadata"]["name"] == "kubecast-leader-election")
            .expect("the Lease role");
        assert_eq!(
            role["rules"][0]["resourceNames"],
            serde_json::json!([
                "kubecast",
                "kubecast-members",
                "kubecast-shard-0",
                "kubecast-shard-1",
                "kubecast-shard-2"
            ])
        );
        assert_eq!(
            role["rules"][0]["verbs"],
            serde_json::json!(["get", "update"])
        );
    }

    fn docs(text: &str) -> Vec<serde_json::Value> {
        text.split("---\n")
            .map(|d| serde_saphyr::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}")))
            .collect()
    }

    #[test]
    fn a_cluster_role_lists_and_watches_exactly_the_configured_resources_by_group() {
        let out = render(
            &[
                grant("apps", "deployments", true, &[]),
                grant("", "pods", true, &[]),
                grant("apps", "replicasets", true, &[]),
                grant("", "nodes", false, &[]),
            ],
            &who(false),
        );
        let d = docs(&out);
        assert_eq!(d.len(), 2);
        assert_eq!(d[0]["kind"], "ClusterRole");
        let rules = d[0]["rules"].as_array().expect("rules");
        assert_eq!(rules.len(), 2);
        assert_eq!(rules[0]["apiGroups"][0], "");
        assert_eq!(rules[0]["resources"], serde_json::json!(["nodes", "pods"]));
        assert_eq!(
            rules[1]["resources"],
            serde_json::json!(["deployments", "replicasets"])
        );
        assert_eq!(rules[1]["verbs"], serde_json::json!(["list", "watch"]));
        assert_eq!(d[1]["kind"], "ClusterRoleBinding");
        assert_eq!(d[1]["subjects"][0]["namespace"], "kubecast");
    }

    #[test]
    fn namespaced_resources_in_listed_namespaces_get_roles_and_leases_a_role_of_their_own() {
        let out = render(
            &[
                grant("", "pods", true, &["a", "b"]),
                grant("", "events", true, &["b"]),
            ],
            &who(true),
        );
        let d = docs(&out);
        let kinds: Vec<(&str, &str)> = d
            .iter()
            .map(|o| {
                (
                    o["kind"].as_str().unwrap_or_default(),
                    o["metadata"]["namespace"].as_str().unwrap_or_default(),
                )
            })
            .collect();
        assert_eq!(
            kinds,
            [
                ("Role", "a"),
                ("RoleBinding", "a"),
                ("Role", "b"),
                ("RoleBinding", "b"),
                ("Role", "kubecast"),
                ("RoleBinding", "kubecast")
            ]
        );
        assert_eq!(
            d[2]["rules"][0]["resources"],
            serde_json::json!(["events", "pods"])
        );
        assert_eq!(d[4]["rules"][0]["resourceNames"][0], "kubecast");
        // A cluster-scoped resource needs the ClusterRole after all.
        let mixed = docs(&render(
            &[
                grant("", "pods", true, &["a"]),
                grant("", "nodes", false, &[]),
            ],
            &who(false),
        ));
        assert_eq!(mixed[0]["kind"], "ClusterRole");
    }
}
