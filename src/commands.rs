//! The short commands that ask the apiserver and print: `kubecast rbac` (the RBAC objects a
//! config needs) and `kubecast schema` (the JSON Schema of a resource's event data). Entry
//! points: [`rbac`], [`schema`]; each returns the process's exit code (2 for a name the
//! apiserver does not serve, or one `rbac` cannot resolve without it; 1 when discovery
//! refuses kubecast).

use std::process::ExitCode;
use std::time::Duration;

use crate::config::{KubernetesConfig, Validated};
use crate::kinds::{discovery, resolve, schema as schemas};
use crate::pipeline::{ResourceError, grants_offline, plan_served};

fn fail(code: u8, message: String) -> ExitCode {
    eprintln!("kubecast: {message}");
    ExitCode::from(code)
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
