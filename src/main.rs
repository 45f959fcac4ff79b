//! The `kubecast` command line. Entry point: [`main`].
//!
//! Exit codes: 0 after a clean shutdown (SIGINT or SIGTERM, sinks drained), 1 when the
//! bridge stopped on a fatal error (rejected credentials, a sink that cannot work), 2 for
//! an invalid config or command line; `replay` adds 3 for a record that `--verify` found
//! incomplete.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use kubecast::config::{self, Config, ConfigError, LogFormat, Validated};
use kubecast::error_chain;

/// Watches Kubernetes Pods (and any resource kind named in `watch.resources`) and publishes
/// every change as a CloudEvent to Kafka, MQTT, HTTP, OpenTelemetry (OTLP), stdout or a file.
///
/// Every event id is derived from the object's uid and resourceVersion, so a change that is
/// delivered twice is recognisably the same change. Every config field can also be set
/// through an environment variable: `KUBECAST_` and the field path in capitals, `__`
/// between levels (`KUBECAST_WATCH__NAMESPACES='[a, b]'`).
#[derive(Debug, Parser)]
#[command(name = "kubecast", version = kubecast::VERSION)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the bridge with a config file until SIGINT or SIGTERM.
    Run(RunArgs),
    /// Check a config file (and the environment's overrides) without connecting anywhere.
    ValidateConfig {
        /// The YAML config file.
        file: PathBuf,
    },
    /// Read a topic back: print, filter, verify, re-publish, or reconstruct the pods at a
    /// time (README, "Audit and replay"). Exit 3 when `--verify` finds the record incomplete.
    Replay(Box<kubecast::replay::ReplayArgs>),
    /// Print the RBAC objects a config needs: `list` and `watch` on exactly the configured
    /// resources (resolved through the apiserver's discovery), and the Lease rules with
    /// leader election. Apply them with `kubectl apply -f -`.
    Rbac(RbacArgs),
    /// Print the Kafka ACLs a config needs, per sink, for its principal: Write on its topics
    /// (prefixed when a topic is a template), the exactly-once sink's state topics and
    /// transactional ids, Create only with `create_topics`; as `kafka-acls.sh` lines or JSON.
    KafkaAcls(KafkaAclsArgs),
    /// Print the JSON Schema of the `data` of a resource's events (the one its events name
    /// as `dataschema`): built-ins from their API types, any other served resource (custom
    /// resources too) from the apiserver's OpenAPI v3.
    Schema(SchemaArgs),
}

#[derive(Debug, Args)]
struct SchemaArgs {
    /// The resource as `kubectl get` names it (`pods`, `deploy`, `widgets.example.com`).
    resource: String,
    /// The data mode: full, summary or reference.
    #[arg(long, default_value = "full", value_parser = ["full", "summary", "reference"])]
    mode: String,
    /// Kubeconfig file (default: KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig context.
    #[arg(long)]
    context: Option<String>,
}

#[derive(Debug, Args)]
struct RbacArgs {
    /// The YAML config file kubecast will run with.
    #[arg(long, short, env = "KUBECAST_CONFIG")]
    config: PathBuf,
    /// The ServiceAccount kubecast runs as, `NAMESPACE/NAME`.
    #[arg(long, default_value = "kubecast/kubecast")]
    service_account: String,
    /// The name of the printed Roles and bindings.
    #[arg(long, default_value = "kubecast")]
    name: String,
    /// Kubeconfig file for discovery; overrides `kubernetes.kubeconfig`.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig context; overrides `kubernetes.context`.
    #[arg(long)]
    context: Option<String>,
}

#[derive(Debug, Args)]
struct KafkaAclsArgs {
    /// The YAML config file kubecast will run with.
    #[arg(long, short, env = "KUBECAST_CONFIG")]
    config: PathBuf,
    /// `text` (kafka-acls.sh command lines) or `json`.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    format: String,
    /// The principal to grant, such as `User:kubecast`. Default: `User:` and each sink's
    /// `sasl.username`.
    #[arg(long)]
    principal: Option<String>,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// The YAML config file (see examples/local.yaml).
    #[arg(long, short, env = "KUBECAST_CONFIG")]
    config: PathBuf,
    /// Kubeconfig file; overrides `kubernetes.kubeconfig` (default: KUBECONFIG, then
    /// ~/.kube/config, then the in-cluster service account).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig context; overrides `kubernetes.context`.
    #[arg(long)]
    context: Option<String>,
    /// Cluster name used in every event's `source`; overrides `cluster`.
    #[arg(long)]
    cluster: Option<String>,
    /// Log filter such as `info` or `kubecast=debug`; overrides `log.level`.
    #[arg(long)]
    log_level: Option<String>,
    /// Serve /metrics, /healthz and /readyz on HOST:PORT; overrides `metrics.address`.
    #[arg(long)]
    metrics_address: Option<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::ValidateConfig { file } => match load(&file, |_| {}) {
            Ok(v) => {
                println!(
                    "{}: valid ({} sink(s): {})",
                    file.display(),
                    v.sinks.len(),
                    v.sinks
                        .iter()
                        .map(|(n, _)| n.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                ExitCode::SUCCESS
            }
            Err(e) => config_error(&e),
        },
        Command::Run(args) => run(args),
        Command::Rbac(args) => rbac(args),
        Command::KafkaAcls(args) => match load(&args.config, |_| {}) {
            Ok(v) => {
                kubecast::commands::kafka_acls(&v, args.principal.as_deref(), args.format == "json")
            }
            Err(e) => config_error(&e),
        },
        Command::Schema(args) => schema(args),
        Command::Replay(args) => {
            init_logging(&config::LogConfig {
                level: "warn".to_string(),
                format: LogFormat::Text,
            });
            kubecast::replay::run(&args)
        }
    }
}

/// Reports an invalid config or command line: exit 2.
fn config_error(e: &(dyn std::error::Error + 'static)) -> ExitCode {
    eprintln!("kubecast: {}", error_chain(e));
    ExitCode::from(2)
}

/// Loads and validates `file`, letting `adjust` apply command-line overrides in between.
fn load(
    file: &std::path::Path,
    adjust: impl FnOnce(&mut Config),
) -> Result<Validated, ConfigError> {
    let mut config = config::load(file)?;
    adjust(&mut config);
    config.validate().map_err(|source| ConfigError::Invalid {
        file: file.display().to_string(),
        source,
    })
}

fn run(args: RunArgs) -> ExitCode {
    let validated = match load(&args.config, |c| {
        if let Some(k) = args.kubeconfig.clone() {
            c.kubernetes.kubeconfig = Some(k);
        }
        if let Some(ctx) = args.context.clone() {
            c.kubernetes.context = Some(ctx);
        }
        if let Some(name) = args.cluster.clone() {
            c.cluster = name;
        }
        if let Some(level) = args.log_level.clone() {
            c.log.level = level;
        }
        if let Some(address) = args.metrics_address.clone() {
            c.metrics.address = Some(address);
        }
    }) {
        Ok(v) => v,
        Err(e) => return config_error(&e),
    };
    init_logging(&validated.log);
    // kube and rumqttc share rustls; ring is its only crypto provider in this build. It can
    // only fail if a provider was installed already, which is just as good.
    let _ = rustls::crypto::ring::default_provider().install_default();
    // One thread runs the whole pipeline (the watches, the event loop, the sinks' tasks,
    // the reactor): a change goes from the watch's socket to the sink's producer without a
    // thread hand-off, and a change costs a few context switches instead of twenty
    // (BENCHMARKS.md). Disk and blocking Kafka calls go to tokio's blocking pool.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("kubecast: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let client =
            match kubecast::cluster::client(&validated.kubernetes, validated.keepalive).await {
                Ok(c) => c,
                Err(e) => return config_error(&e),
            };
        match kubecast::pipeline::run(validated, client, shutdown_signal()).await {
            Ok(_) => ExitCode::SUCCESS,
            // A resource the cluster does not serve, or one the config may not watch.
            Err(e) if e.is_config() => config_error(&e),
            Err(e) => {
                let message = error_chain(&e);
                tracing::error!(error = %message, "kubecast stopped on a fatal error");
                eprintln!("kubecast: {message}");
                ExitCode::FAILURE
            }
        }
    })
}

/// A single-threaded runtime with rustls' provider installed, for the short commands.
fn short_runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    init_logging(&config::LogConfig {
        level: "warn".to_string(),
        format: LogFormat::Text,
    });
    let _ = rustls::crypto::ring::default_provider().install_default();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("kubecast: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        })
}

fn rbac(args: RbacArgs) -> ExitCode {
    let validated = match load(&args.config, |c| {
        if let Some(k) = args.kubeconfig.clone() {
            c.kubernetes.kubeconfig = Some(k);
        }
        if let Some(ctx) = args.context.clone() {
            c.kubernetes.context = Some(ctx);
        }
    }) {
        Ok(v) => v,
        Err(e) => return config_error(&e),
    };
    match short_runtime() {
        Ok(rt) => rt.block_on(kubecast::commands::rbac(
            &validated,
            &args.service_account,
            &args.name,
        )),
        Err(code) => code,
    }
}

fn schema(args: SchemaArgs) -> ExitCode {
    let k = config::KubernetesConfig {
        kubeconfig: args.kubeconfig,
        context: args.context,
        ..Default::default()
    };
    match short_runtime() {
        Ok(rt) => rt.block_on(kubecast::commands::schema(&k, &args.resource, &args.mode)),
        Err(code) => code,
    }
}

fn init_logging(log: &config::LogConfig) {
    use tracing_subscriber::EnvFilter;
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|f| EnvFilter::try_new(f).ok())
        // `validate` checked that the level parses.
        .unwrap_or_else(|| {
            EnvFilter::try_new(&log.level).unwrap_or_else(|_| EnvFilter::new("info"))
        });
    // Colours only on a terminal: piped logs stay plain text for grep and collectors.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    match log.format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

/// Completes on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(t) => t,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    tracing::info!("shutting down: delivering what is queued");
}
