//! The short commands that ask the apiserver and print: `kubecast rbac` (the RBAC objects a
//! config needs) and `kubecast schema` (the JSON Schema of a resource's event data). Entry
//! points: [`rbac`], [`schema`]; each returns the process's exit code (2 for a name the
//! apiserver does not serve, 1 when it cannot be asked).

use std::process::ExitCode;
use std::time::Duration;

use crate::config::{KubernetesConfig, Validated};
use crate::kinds::{discovery, resolve, schema as schemas};
use crate::pipeline::{ResourceError, plan_resources};

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
    let client = match crate::cluster::client(&config.kubernetes).await {
        Ok(c) => c,
        Err(e) => return fail(2, crate::error_chain(&e)),
    };
    let backoff = Duration::from_secs(u64::from(config.watch.max_backoff_seconds));
    let planned = match plan_resources(&client, &config.watch, backoff).await {
        Ok(p) => p,
        Err(e @ ResourceError::Invalid { .. }) => return fail(2, crate::error_chain(&e)),
        Err(e) => return fail(1, crate::error_chain(&e)),
    };
    let grants: Vec<_> = planned.iter().map(|p| p.grant()).collect();
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
    };
    print!("{}", crate::rbac::render(&grants, &who));
    ExitCode::SUCCESS
}

/// Prints the JSON Schema of `resource`'s data in `mode`.
pub async fn schema(k: &KubernetesConfig, resource: &str, mode: &str) -> ExitCode {
    let client = match crate::cluster::client(k).await {
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
