//! `docker-compose.yml`, loaded by Compose's own loader (compose-go, the library Docker
//! Compose reads files with: the Compose specification's schema, interpolation and
//! consistency checks), built by `scripts/stack tool compose-config`. No container engine
//! runs here; what the file promises is checked on the resolved project: the three services,
//! kubecast waiting for a healthy Kafka, the hardening of deploy/, ports on loopback only, and
//! a config that kubecast accepts and whose brokers are the file's own services.

mod support;

use std::path::Path;
use std::process::Command;

use serde_json::Value;
use support::deploy::tool;
use support::kubecast::{run_to_end, scratch_dir};
use support::{Stack, repo};

/// Runs compose-config on `file` with `KUBECAST_KUBECONFIG` set to the stack's kubeconfig;
/// returns the resolved project, or the loader's error.
fn load(stack: &Stack, file: &Path) -> Result<Value, String> {
    let out = Command::new(tool(stack, "compose-config"))
        .arg(file)
        .env("KUBECAST_KUBECONFIG", &stack.kubeconfig)
        .env_remove("KUBECAST_CLUSTER")
        .output()
        .unwrap_or_else(|e| panic!("running compose-config: {e}"));
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("compose-config printed no JSON: {e}"))
}

#[test]
fn compose_accepts_the_file_and_it_runs_kubecast_next_to_kafka_and_mosquitto() {
    let stack = Stack::load();
    let project = load(&stack, &repo().join("docker-compose.yml"))
        .unwrap_or_else(|e| panic!("Compose rejects docker-compose.yml: {e}"));
    let services = &project["services"];
    let mut names: Vec<&String> = services.as_object().expect("services").keys().collect();
    names.sort();
    assert_eq!(names, ["kafka", "kubecast", "mosquitto"]);

    let kubecast = &services["kubecast"];
    assert_eq!(
        kubecast["depends_on"]["kafka"]["condition"],
        "service_healthy"
    );
    assert_eq!(
        kubecast["depends_on"]["mosquitto"]["condition"],
        "service_started"
    );
    assert!(
        services["kafka"]["healthcheck"]["test"].is_array(),
        "kubecast waits for a Kafka health check that does not exist"
    );
    assert!(
        services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"]
            .as_str()
            .is_some_and(|r| r.contains("controller")),
        "Kafka is not its own KRaft controller"
    );
    // Hardened as in deploy/.
    assert_eq!(kubecast["user"], "65532:65532");
    assert_eq!(kubecast["read_only"], true);
    assert_eq!(kubecast["cap_drop"], serde_json::json!(["ALL"]));
    assert!(
        repo()
            .join(kubecast["build"]["dockerfile"].as_str().unwrap_or("?"))
            .is_file(),
        "kubecast's Dockerfile is missing: {}",
        kubecast["build"]
    );
    // Published on the host's loopback only.
    for (name, service) in services.as_object().expect("services") {
        for port in service["ports"].as_array().into_iter().flatten() {
            assert_eq!(port["host_ip"], "127.0.0.1", "{name} publishes {port}");
        }
    }

    // The mounts: the config and the kubeconfig exist (read-only), the state is a volume.
    let mut config_file = None;
    for mount in kubecast["volumes"].as_array().expect("kubecast's volumes") {
        let (source, target) = (
            mount["source"].as_str().unwrap_or_default(),
            mount["target"].as_str().unwrap_or_default(),
        );
        match target {
            "/etc/kubecast/kubecast.yaml" | "/etc/kubecast/kubeconfig" => {
                assert_eq!(mount["type"], "bind", "{mount}");
                assert_eq!(mount["read_only"], true, "{mount}");
                assert!(
                    Path::new(source).is_file(),
                    "{target} mounts {source}, which is no file"
                );
                if target.ends_with("kubecast.yaml") {
                    config_file = Some(source.to_string());
                }
            }
            "/var/lib/kubecast" => assert_eq!(mount["type"], "volume", "{mount}"),
            other => panic!("unexpected mount {other}"),
        }
    }
    assert_eq!(
        kubecast["volumes"].as_array().map(Vec::len),
        Some(3),
        "config, kubeconfig and state"
    );

    // kubecast accepts that config with the environment Compose gives it (paths made local).
    let config_file = config_file.expect("no config mounted at /etc/kubecast/kubecast.yaml");
    let text = std::fs::read_to_string(&config_file).expect("reading the mounted config");
    let dir = scratch_dir("compose");
    let local = dir.join("kubecast.yaml");
    std::fs::write(&local, &text).expect("writing the config");
    let env: Vec<(String, String)> = kubecast["environment"]
        .as_object()
        .expect("kubecast's environment")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
        .collect();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let (code, stdout, stderr) = run_to_end(&["validate-config", &local.to_string_lossy()], &env);
    assert_eq!(
        code,
        Some(0),
        "kubecast rejects {config_file}:\n{stdout}{stderr}"
    );

    // Its brokers are the file's own services, on the ports they listen on inside.
    let config: Value = serde_saphyr::from_str(&text).expect("the config is YAML");
    assert_eq!(config["sinks"]["kafka"]["brokers"], "kafka:9092");
    assert!(
        services["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"]
            .as_str()
            .is_some_and(|l| l.contains("//kafka:9092")),
        "Kafka does not advertise kafka:9092"
    );
    assert_eq!(config["sinks"]["mqtt"]["url"], "mqtt://mosquitto:1883");
    let mosquitto_conf = services["mosquitto"]["volumes"][0]["source"]
        .as_str()
        .expect("mosquitto's config mount");
    let conf = std::fs::read_to_string(mosquitto_conf).expect("reading mosquitto.conf");
    assert!(conf.lines().any(|l| l.trim() == "listener 1883"), "{conf}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn compose_rejects_a_broken_copy_so_the_check_is_real() {
    let stack = Stack::load();
    let text = std::fs::read_to_string(repo().join("docker-compose.yml")).expect("the file");
    let dir = scratch_dir("compose-broken");
    let file = dir.join("docker-compose.yml");
    // The copy as it is loads there, so each refusal below is the edit's doing.
    std::fs::write(&file, &text).expect("writing the copy");
    if let Err(e) = load(&stack, &file) {
        panic!("Compose rejects an unchanged copy of docker-compose.yml: {e}");
    }
    for (what, broken) in [
        (
            "a dependency on a service that does not exist",
            text.replace(
                "      kafka:\n        condition",
                "      kafkaa:\n        condition",
            ),
        ),
        (
            "a key the Compose specification does not have",
            text.replace(
                "    read_only: true",
                "    read_only: true\n    readonly_root: true",
            ),
        ),
    ] {
        assert_ne!(broken, text, "the edit for {what} did not apply");
        std::fs::write(&file, broken).expect("writing the copy");
        assert!(load(&stack, &file).is_err(), "Compose accepts {what}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
