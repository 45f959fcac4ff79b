//! The short commands that print what a config needs or what a resource's events hold:
//! `kubecast rbac` (the RBAC objects a config needs, asking the apiserver), `kubecast
//! kafka-acls` (the Kafka ACLs it needs, from the config alone) and `kubecast schema` (the
//! JSON Schema of a resource's event data). Entry points: [`rbac`], [`kafka_acls`],
//! [`schema`]; each returns the process's exit code (2 for a name the apiserver does not
//! serve, or one `rbac` cannot resolve without it, or a Kafka sink without a principal; 1
//! when discovery refuses kubecast).

use std::process::ExitCode;
use std::time::Duration;

use crate::config::{KubernetesConfig, Validated};
use crate::kinds::{discovery, resolve, schema as schemas};
use crate::pipeline::{ResourceError, grants_offline, plan_served};

fn fail(code: u8, message: String) -> ExitCode {
    eprintln!("kubecast: {message}");
    ExitCode::from(code)
}

/// Prints the Kafka ACLs `config` needs, per Kafka sink (and per shard), for `principal` or
/// each sink's SASL user: as `kafka-acls.sh` command lines, or JSON with `json`.
pub fn kafka_acls(config: &Validated, principal: Option<&str>, json: bool) -> ExitCode {
    use crate::sinks::SinkKind;
    use crate::sinks::kafka::acls;
    let shards: Vec<Option<crate::model::Shard>> = if config.shards > 1 {
        (0..config.shards)
            .map(|i| crate::model::Shard::new(i, config.shards))
            .collect()
    } else {
        vec![None]
    };
    let mut all = Vec::new();
    let mut brokers = Vec::new();
    for shard in shards {
        for (name, sink) in config.source.sink_configs(shard) {
            let SinkKind::Kafka(kafka) = &sink.kind else {
                continue;
            };
            let at = format!("sinks.{name}");
            let settings = match kafka.settings(&at, &sink.common, &config.cluster) {
                Ok(s) => s,
                Err(issues) => {
                    return fail(
                        2,
                        format!(
                            "{at}: {}",
                            issues
                                .iter()
                                .map(|i| format!("{}: {}", i.field, i.message))
                                .collect::<Vec<_>>()
                                .join("; ")
                        ),
                    );
                }
            };
            let who = match (principal, kafka.sasl.as_ref()) {
                (Some(p), _) => p.to_string(),
                (None, Some(sasl)) => format!("User:{}", sasl.username),
                (None, None) => {
                    return fail(
                        2,
                        format!(
                            "{at}: no `sasl.username` to name the principal; pass --principal (with mTLS, the principal Kafka makes of kubecast's certificate, such as `User:CN=kubecast`)"
                        ),
                    );
                }
            };
            if !brokers.contains(&kafka.brokers) {
                brokers.push(kafka.brokers.clone());
            }
            all.extend(acls::of_sink(&name, &settings, &who));
        }
    }
    if brokers.is_empty() {
        return fail(2, "the config has no Kafka sink".to_string());
    }
    let all = acls::dedup(all);
    if json {
        print!("{}", acls::render_json(&all));
    } else {
        print!("{}", acls::render_commands(&all, &brokers.join(",")));
    }
    ExitCode::SUCCESS
}

/// Prints the RBAC objects `config` needs, for the ServiceAccount `NAMESPACE/NAME`.
pub async fn rbac(config: &Validated, service_account: &str, name: &str) -> ExitCode {
    let Some((sa_namespace, sa_name)) = service_account.split_once('/') else {
        return fail(
            2,
            format!("--service-account must be NAMESPACE/NAME, not `{service_account}`"),
        );
    };
    let grants = match grants(config).await {
        Ok(g) => g,
        Err(e @ ResourceError::Invalid { .. }) => return fail(2, crate::error_chain(&e)),
        Err(e) => return fail(1, crate::error_chain(&e)),
    };
    let lease = config.leader_election.as_ref().map(|e| {
        let ns = e
            .namespace
            .clone()
            .unwrap_or_else(|| sa_namespace.to_string());
        (e.lease.clone(), ns)
    });
    let who = crate::rbac::Subject {
        service_account: sa_name.to_string(),
        namespace: sa_namespace.to_string(),
        name: name.to_string(),
        lease,
        shards: config.shards,
    };
    print!("{}", crate::rbac::render(&grants, &who));
    ExitCode::SUCCESS
}

/// How long `kubecast rbac` waits for discovery before it works from the config alone.
const DISCOVERY_WAIT: Duration = Duration::from_secs(15);

/// The grants `config` needs: its names resolved by discovery when the apiserver answers,
/// else taken as the config declares them (`PLURAL.GROUP` with a `scope`).
async fn grants(config: &Validated) -> Result<Vec<crate::rbac::Grant>, ResourceError> {
    let served = match crate::cluster::client(&config.kubernetes, config.keepalive).await {
        Err(e) => Err(crate::error_chain(&e)),
        Ok(client) => {
            match tokio::time::timeout(DISCOVERY_WAIT, discovery::served(&client)).await {
                Ok(Ok(served)) => Ok(served),
                Ok(Err(e)) if !e.is_retriable() => return Err(e.into()),
                Ok(Err(e)) => Err(crate::error_chain(&e)),
                Err(_) => Err(format!(
                    "no answer from discovery within {DISCOVERY_WAIT:?}"
                )),
            }
        }
    };
    match served {
        Ok(served) => plan_served(&config.watch, &served)?
            .iter()
            .map(|p| p.grant())
            .collect(),
        Err(why) => {
            eprintln!(
                "kubecast: the apiserver could not be asked ({why}); the rules follow the config's PLURAL.GROUP names and scopes"
            );
            grants_offline(&config.watch, &why)
        }
    }
}

/// Prints the JSON Schema of `resource`'s data in `mode`.
pub async fn schema(k: &KubernetesConfig, resource: &str, mode: &str) -> ExitCode {
    // One discovery request: the keepalive defaults are as good as any.
    let client = match crate::cluster::client(k, crate::cluster::Keepalive::default()).await {
        Ok(c) => c,
        Err(e) => return fail(2, crate::error_chain(&e)),
    };
    let served = match discovery::served(&client).await {
        Ok(s) => s,
        Err(e) => return fail(1, crate::error_chain(&e)),
    };
    let r = match resolve::resolve(resource, &served) {
        Ok(r) => r,
        Err(e) => return fail(2, e.to_string()),
    };
    let schema = match schemas::shipped(&r, mode) {
        Some(s) => s,
        None => match schemas::from_openapi(&client, &r).await {
            Ok(s) => s,
            Err(e) => return fail(1, crate::error_chain(&e)),
        },
    };
    // A JSON value always serializes.
    println!(
        "{}",
        serde_json::to_string_pretty(&schema).unwrap_or_default()
    );
    ExitCode::SUCCESS
}
