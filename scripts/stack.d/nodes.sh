# shellcheck shell=bash
# The stack's scheduler and simulated nodes: kube-scheduler binds pods to nodes, kwok plays
# the kubelet of every node labelled `kwok.x-k8s.io/node: fake` (heartbeats, pod status,
# graceful termination, as the stages in scripts/kwok/ say), and `scripts/stack nodes` makes
# and removes such nodes. Sourced by scripts/stack.

# The label kwok manages nodes by; a node without it is one whose kubelet is gone. A label,
# not an annotation: the apiserver filters labels, so a node that loses it reaches kwok as
# deleted and kwok lets go of it (an annotation that goes is not noticed).
KWOK_LABEL=kwok.x-k8s.io/node
# What every simulated node offers: as many pods as a kubelet takes by default.
NODE_PODS=${KUBECAST_STACK_NODE_PODS:-110}

# --- kube-scheduler -------------------------------------------------------------------------

start_kube_scheduler() {
    local bin dir=$STATE/kube-scheduler
    bin=$(kube_scheduler_binary)
    ensure_pki
    write_kubeconfig
    mkdir -p "$dir"
    # Upstream's default profile; only the client's rate is raised (see CLIENT_QPS).
    cat >"$dir/config.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: $STATE/kubeconfig
  qps: $CLIENT_QPS
  burst: $((CLIENT_QPS * 2))
leaderElection:
  leaderElect: false
EOF
    spawn kube-scheduler "$bin" --config="$dir/config.yaml" \
        --authentication-kubeconfig="$STATE/kubeconfig" --authorization-kubeconfig="$STATE/kubeconfig" \
        --bind-address="$HOST" --secure-port="$SCHEDULER_PORT" --cert-dir="$dir/certs"
}

check_kube_scheduler() { [[ $(curl -ksS --max-time 3 "https://$HOST:$SCHEDULER_PORT/healthz") == ok ]]; }

version_kube_scheduler() { version_kube_apiserver; }

# --- kwok -----------------------------------------------------------------------------------

start_kwok() {
    local bin
    bin=$(kwok_binary)
    write_kubeconfig
    # Leases of 40 s renewed every 10 s, as a kubelet's. Pod IPs come from a range no test
    # reaches (they are only written into pod status).
    spawn kwok "$bin" --kubeconfig="$STATE/kubeconfig" \
        --manage-nodes-with-label-selector="$KWOK_LABEL=fake" \
        --node-lease-duration-seconds=40 --cidr=10.128.0.0/9 \
        --server-address="$HOST:$KWOK_PORT" \
        -c "$ROOT/scripts/kwok/nodes.yaml" -c "$ROOT/scripts/kwok/pods.yaml"
}

check_kwok() { [[ $(curl -sS --max-time 3 "http://$HOST:$KWOK_PORT/healthz") == ok ]]; }

version_kwok() { echo "$KWOK_VERSION"; }

# --- scripts/stack nodes --------------------------------------------------------------------

# The simulated nodes, one name per line, in the order they were made.
sim_nodes() {
    "$(kubectl_binary)" --kubeconfig="$STATE/kubeconfig" get nodes -l kubecast.dev/simulated=true \
        -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}' | sort -V
}

# A Node as a kubelet registers it, for kwok to manage.
node_manifest() { # name
    cat <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: $1
  annotations:
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    $KWOK_LABEL: fake
    kubecast.dev/simulated: "true"
    kubernetes.io/arch: amd64
    kubernetes.io/hostname: $1
    kubernetes.io/os: linux
    node.kubernetes.io/instance-type: kwok
status:
  allocatable: {cpu: "32", memory: 256Gi, pods: "$NODE_PODS", ephemeral-storage: 1Ti}
  capacity: {cpu: "32", memory: 256Gi, pods: "$NODE_PODS", ephemeral-storage: 1Ti}
EOF
}

# Makes or removes simulated nodes until there are N, and waits until every one is Ready.
# Nodes are named sim-node-1, sim-node-2, ...; the highest go first. The pods of a removed
# node are removed by pod GC, as when a cloud deletes a machine.
nodes_to() { # N
    local want=$1 have i kubectl
    [[ $want =~ ^[0-9]+$ ]] || die "nodes: N must be a number of nodes, not '$want'"
    kubectl=$(kubectl_binary)
    check_kwok || die "nodes: kwok is not running; run scripts/stack up first"
    mapfile -t have < <(sim_nodes)
    if ((${#have[@]} < want)); then
        for ((i = ${#have[@]} + 1; i <= want; i++)); do node_manifest "sim-node-$i"; done |
            "$kubectl" --kubeconfig="$STATE/kubeconfig" create -f - >/dev/null
    elif ((${#have[@]} > want)); then
        printf '%s\n' "${have[@]:want}" | xargs "$kubectl" --kubeconfig="$STATE/kubeconfig" delete node --wait=false >/dev/null
    fi
    ((want == 0)) && return 0
    "$kubectl" --kubeconfig="$STATE/kubeconfig" wait node -l kubecast.dev/simulated=true \
        --for=condition=Ready --timeout="$((60 + want / 10))s" >/dev/null ||
        die "nodes: not every simulated node went Ready; see $(log_file kwok)"
    log "nodes: $want simulated nodes Ready"
}

# Stops or restarts one node's heartbeat: kwok lets go of a node without its label.
node_heartbeat() { # stop|start NAME
    local value=- done=stopped
    [[ $1 == start ]] && value="=fake" done=restarted
    "$(kubectl_binary)" --kubeconfig="$STATE/kubeconfig" label --overwrite node "$2" \
        "$KWOK_LABEL$value" >/dev/null
    log "nodes: $2: heartbeat $done"
}

cmd_nodes() {
    [[ -f $STATE/kubeconfig ]] || die "the stack has not been brought up; run scripts/stack up"
    case ${1:-} in
    stop | start)
        [[ $# -eq 2 ]] || die "usage: scripts/stack nodes $1 NAME"
        node_heartbeat "$1" "$2"
        ;;
    "") sim_nodes ;;
    *) nodes_to "$1" ;;
    esac
}
