# shellcheck shell=bash
# Settings and helpers shared by scripts/stack and its parts. Sourced, never run.
#
# Every setting can be overridden from the environment, so two checkouts (or a CI job next
# to a developer's stack) can run side by side on other ports.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
STATE=${KUBECAST_STACK_DIR:-$ROOT/target/stack}
CACHE=${KUBECAST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubecast}

ETCD_VERSION=$(awk '$1 == "go.etcd.io/etcd/server/v3" { print $2; exit }' "$ROOT/scripts/go/etcd/go.mod")
K8S_VERSION=$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' "$ROOT/scripts/go/kubernetes/go.mod")
HELM_VERSION=$(awk '$1 == "helm.sh/helm/v4" { print $2; exit }' "$ROOT/scripts/go/helm/go.mod")
KUSTOMIZE_VERSION=$(awk '$1 == "sigs.k8s.io/kustomize/kustomize/v5" { print $2; exit }' "$ROOT/scripts/go/kustomize/go.mod")
COMPOSE_GO_VERSION=$(awk '$1 == "require" && $2 == "github.com/compose-spec/compose-go/v2" { print $3; exit }' \
    "$ROOT/scripts/go/compose-config/go.mod")
KWOK_VERSION=$(awk '$1 == "sigs.k8s.io/kwok" { print $2; exit }' "$ROOT/scripts/go/kwok/go.mod")
ALERTMANAGER_VERSION=$(awk '$1 == "github.com/prometheus/alertmanager" { print $2; exit }' \
    "$ROOT/scripts/go/alertmanager/go.mod")
KAFKA_VERSION=${KUBECAST_STACK_KAFKA_VERSION:-4.4.0}
# The Go toolchain fetched through the module proxy when the machine has no usable Go.
GO_TOOLCHAIN=go1.26.8

# Loopback only: nothing in the test bed listens on, or talks to, any other address.
HOST=127.0.0.1
ETCD_PORT=${KUBECAST_STACK_ETCD_PORT:-12379}
ETCD_PEER_PORT=${KUBECAST_STACK_ETCD_PEER_PORT:-12380}
APISERVER_PORT=${KUBECAST_STACK_APISERVER_PORT:-16443}
# kube-controller-manager's health endpoint (HTTPS, on loopback).
CONTROLLER_MANAGER_PORT=${KUBECAST_STACK_CONTROLLER_MANAGER_PORT:-16444}
# kube-scheduler's health endpoint (HTTPS) and kwok's (HTTP), both on loopback.
SCHEDULER_PORT=${KUBECAST_STACK_SCHEDULER_PORT:-16445}
KWOK_PORT=${KUBECAST_STACK_KWOK_PORT:-16446}
KAFKA_PORT=${KUBECAST_STACK_KAFKA_PORT:-19092}
KAFKA_CONTROLLER_PORT=${KUBECAST_STACK_KAFKA_CONTROLLER_PORT:-19093}
MQTT_PORT=${KUBECAST_STACK_MQTT_PORT:-11883}
# Listeners that require a login, for tests of rejected credentials: Kafka SASL_PLAINTEXT
# (PLAIN) and Mosquitto with a password file. One account, for loopback tests only.
KAFKA_SASL_PORT=${KUBECAST_STACK_KAFKA_SASL_PORT:-19094}
MQTT_AUTH_PORT=${KUBECAST_STACK_MQTT_AUTH_PORT:-11884}
# TLS listeners with the stack's serving certificate (target/stack/pki): Kafka SSL and
# Mosquitto over TLS, each also in a variant that requires a client certificate.
KAFKA_SSL_PORT=${KUBECAST_STACK_KAFKA_SSL_PORT:-19095}
KAFKA_MTLS_PORT=${KUBECAST_STACK_KAFKA_MTLS_PORT:-19096}
MQTT_TLS_PORT=${KUBECAST_STACK_MQTT_TLS_PORT:-11885}
MQTT_MTLS_PORT=${KUBECAST_STACK_MQTT_MTLS_PORT:-11886}
# Two Prometheus Alertmanagers, not clustered (each gets every alert from kubecast, as from
# Prometheus), and the webhook receiver both notify.
ALERTMANAGER_PORT=${KUBECAST_STACK_ALERTMANAGER_PORT:-19193}
ALERTMANAGER_2_PORT=${KUBECAST_STACK_ALERTMANAGER_2_PORT:-19194}
AM_WEBHOOK_PORT=${KUBECAST_STACK_AM_WEBHOOK_PORT:-19195}
# The OpenTelemetry Collector's OTLP receiver.
OTLP_GRPC_PORT=${KUBECAST_STACK_OTLP_GRPC_PORT:-14317}
OTLP_HTTP_PORT=${KUBECAST_STACK_OTLP_HTTP_PORT:-14318}
STACK_USER=kubecast
STACK_PASSWORD=kubecast-stack-password
# How often kube-apiserver compacts etcd (its --etcd-compaction-interval). Upstream's default
# is 5m; a test that needs `410 Gone` sooner sets a few seconds, or runs `scripts/stack compact`.
COMPACTION_INTERVAL=${KUBECAST_STACK_COMPACTION_INTERVAL:-5m}
# Requests per second that the controller-manager and the scheduler may send the apiserver
# (burst twice that). Upstream's defaults (20 and 50) hold a rollout of thousands of pods back
# for minutes; clusterloader2's test clusters raise them the same way.
CLIENT_QPS=${KUBECAST_STACK_CLIENT_QPS:-200}
# Seconds that `up` waits for each component to answer.
READY_TIMEOUT=${KUBECAST_STACK_READY_TIMEOUT:-120}

COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok kafka mosquitto am-webhook
    alertmanager alertmanager-2 otelcol)

log() { printf 'stack: %s\n' "$*" >&2; }
die() {
    printf 'stack: error: %s\n' "$*" >&2
    exit 1
}

# Prints the ports a component listens on.
component_ports() {
    case $1 in
    etcd) echo "$ETCD_PORT $ETCD_PEER_PORT" ;;
    kube-apiserver) echo "$APISERVER_PORT" ;;
    kube-controller-manager) echo "$CONTROLLER_MANAGER_PORT" ;;
    kube-scheduler) echo "$SCHEDULER_PORT" ;;
    kwok) echo "$KWOK_PORT" ;;
    kafka) echo "$KAFKA_PORT $KAFKA_CONTROLLER_PORT $KAFKA_SASL_PORT $KAFKA_SSL_PORT $KAFKA_MTLS_PORT" ;;
    mosquitto) echo "$MQTT_PORT $MQTT_AUTH_PORT $MQTT_TLS_PORT $MQTT_MTLS_PORT" ;;
    alertmanager) echo "$ALERTMANAGER_PORT" ;;
    alertmanager-2) echo "$ALERTMANAGER_2_PORT" ;;
    am-webhook) echo "$AM_WEBHOOK_PORT" ;;
    otelcol) echo "$OTLP_GRPC_PORT $OTLP_HTTP_PORT" ;;
    esac
}

# Accepts the component names users are likely to type and prints the canonical one.
canonical_component() {
    case $1 in
    etcd) echo etcd ;;
    kube-apiserver | apiserver | kube) echo kube-apiserver ;;
    kube-controller-manager | controller-manager | controllers) echo kube-controller-manager ;;
    kube-scheduler | scheduler) echo kube-scheduler ;;
    kwok | nodes) echo kwok ;;
    kafka) echo kafka ;;
    mosquitto | mqtt) echo mosquitto ;;
    alertmanager | alertmanager-1 | am) echo alertmanager ;;
    alertmanager-2 | am-2) echo alertmanager-2 ;;
    am-webhook | webhook) echo am-webhook ;;
    otelcol | collector | otel) echo otelcol ;;
    kube-apiserver-[0-9]*) echo "$1" ;;
    *) die "unknown component '$1'; expected one of: ${COMPONENTS[*]}" ;;
    esac
}

pid_file() { echo "$STATE/$1/pid"; }
log_file() { echo "$STATE/$1/log"; }

# True when the component's recorded process is alive.
is_running() {
    local f pid
    f=$(pid_file "$1")
    [[ -f $f ]] || return 1
    pid=$(<"$f")
    [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null
}

port_open() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

# Names the process that listens on a port, where ss can tell.
port_owner() {
    ss -ltnpH "sport = :$1" 2>/dev/null | sed -n 's/.*users:(("\([^"]*\)",pid=\([0-9]*\).*/\1 (pid \2)/p' | head -n 1
}

# Fails, naming the component and port, if another process already holds one of its ports.
check_ports_free() {
    local name=$1 port owner
    for port in $(component_ports "$name"); do
        if port_open "$port"; then
            owner=$(port_owner "$port")
            die "$name: port $HOST:$port is already in use${owner:+ by $owner}; stop that process or choose another port (see README, Development)"
        fi
    done
}

log_tail() {
    local f
    f=$(log_file "$1")
    [[ -f $f ]] || return 0
    printf -- '--- last lines of %s ---\n' "$f" >&2
    tail -n "${2:-30}" "$f" >&2
    printf -- '---\n' >&2
}

# Starts a command in its own session, detached from the terminal, logging to the component's
# log file, and records its pid.
spawn() {
    local name=$1
    shift
    mkdir -p "$STATE/$name"
    printf '\n=== %s: starting %s\n' "$(date -u +%FT%TZ)" "$name" >>"$(log_file "$name")"
    setsid "$@" >>"$(log_file "$name")" 2>&1 </dev/null &
    echo $! >"$(pid_file "$name")"
}

# Waits until `check_NAME` (or the command given after NAME) succeeds; fails early if the
# process died, and with its log tail.
wait_ready() {
    local name=$1 deadline=$((SECONDS + READY_TIMEOUT))
    local check=("${@:2}")
    ((${#check[@]})) || check=("check_${name//-/_}")
    while ! "${check[@]}" >/dev/null 2>&1; do
        if ! is_running "$name"; then
            log_tail "$name"
            die "$name: the process exited before it answered; its log is $(log_file "$name")"
        fi
        if ((SECONDS >= deadline)); then
            log_tail "$name"
            die "$name: no answer within ${READY_TIMEOUT}s; its log is $(log_file "$name")"
        fi
        sleep 0.3
    done
}

# Stops a component: SIGTERM, then SIGKILL after a grace period (GRACE seconds, default 20).
# Kills its whole session, so a JVM or a wrapper leaves nothing behind.
stop_component() {
    local name=$1 grace=${2:-20} pid i
    is_running "$name" || {
        rm -f "$(pid_file "$name")"
        return 0
    }
    pid=$(<"$(pid_file "$name")")
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < grace * 5; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "$name: did not stop within ${grace}s of SIGTERM; sending SIGKILL"
        kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$(pid_file "$name")"
}
