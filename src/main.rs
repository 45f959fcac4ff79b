//! The `kubecast` command line. Entry point: [`main`].

use clap::Parser;

/// Watches Kubernetes Pods and publishes every change as a CloudEvent to Kafka and MQTT.
///
/// Every event id is derived from the pod's uid and resourceVersion, so a change that is
/// delivered twice is recognisably the same change.
#[derive(Debug, Parser)]
#[command(name = "kubecast", version = kubecast::VERSION)]
struct Cli {}

fn main() {
    // Parsing handles `--help` and `--version` and exits with code 2 on unknown arguments.
    let _cli = Cli::parse();
    eprintln!(
        "kubecast {}: the Pod-to-CloudEvents bridge is not built yet; see README.md",
        kubecast::VERSION
    );
}
