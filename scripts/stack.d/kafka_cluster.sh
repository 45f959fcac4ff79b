# shellcheck shell=bash
# A production-shaped Kafka beside the stack's single broker: three KRaft nodes (each a
# controller and a broker) of the same Kafka, SCRAM-SHA-512 logins, the StandardAuthorizer,
# replication factor 3 with min.insync.replicas 2 and no auto-created topics. Two users: an
# admin (super user; the tests create topics and grant ACLs with it) and `kubecast`, who may
# do nothing until ACLs are granted. Sourced by scripts/stack; `scripts/stack kafka-cluster`.
#
# Listeners per node N (1..3): CLIENT on KAFKA_CLUSTER_PORT+N-1 (SASL_PLAINTEXT, SCRAM-SHA-512;
# the brokers replicate over it too, as the admin), CONTROLLER on KAFKA_CLUSTER_CONTROLLER_PORT
# +N-1 (SASL_PLAINTEXT, PLAIN: SCRAM credentials live in the metadata log the controllers
# serve, so the quorum cannot use them). Both users' SCRAM credentials are written into the
# log directories when they are formatted.

KAFKA_CLUSTER_PORT=${KUBECAST_STACK_KAFKA_CLUSTER_PORT:-19301}
KAFKA_CLUSTER_CONTROLLER_PORT=${KUBECAST_STACK_KAFKA_CLUSTER_CONTROLLER_PORT:-19311}
KAFKA_CLUSTER_ADMIN=admin
KAFKA_CLUSTER_ADMIN_PASSWORD=kubecast-stack-admin-password
KAFKA_CLUSTER_USER=kubecast
KAFKA_CLUSTER_PASSWORD=kubecast-stack-cluster-password
# Each node's heap: three JVMs and the rest of the stack fit a 24 GiB, 2-core machine.
KAFKA_CLUSTER_HEAP=${KUBECAST_STACK_KAFKA_CLUSTER_HEAP:-512m}

kafka_cluster_bootstrap() {
    echo "$HOST:$KAFKA_CLUSTER_PORT,$HOST:$((KAFKA_CLUSTER_PORT + 1)),$HOST:$((KAFKA_CLUSTER_PORT + 2))"
}

kafka_node_port() { echo $((KAFKA_CLUSTER_PORT + $1 - 1)); }
kafka_node_controller_port() { echo $((KAFKA_CLUSTER_CONTROLLER_PORT + $1 - 1)); }

start_kafka_node() {
    local n=$1 libs dir=$STATE/kafka-$1 port cport voters="" i
    libs=$(kafka_libs)
    ensure_java
    port=$(kafka_node_port "$n")
    cport=$(kafka_node_controller_port "$n")
    for i in 1 2 3; do
        voters+="${voters:+,}$i@$HOST:$(kafka_node_controller_port "$i")"
    done
    mkdir -p "$dir"
    cat >"$dir/server.properties" <<EOF
process.roles=broker,controller
node.id=$n
controller.quorum.voters=$voters
listeners=CLIENT://$HOST:$port,CONTROLLER://$HOST:$cport
advertised.listeners=CLIENT://$HOST:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=CLIENT
listener.security.protocol.map=CLIENT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT
sasl.enabled.mechanisms=SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.client.sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.client.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="$KAFKA_CLUSTER_ADMIN" password="$KAFKA_CLUSTER_ADMIN_PASSWORD";
sasl.mechanism.controller.protocol=PLAIN
listener.name.controller.sasl.enabled.mechanisms=PLAIN
listener.name.controller.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="$KAFKA_CLUSTER_ADMIN" password="$KAFKA_CLUSTER_ADMIN_PASSWORD" user_$KAFKA_CLUSTER_ADMIN="$KAFKA_CLUSTER_ADMIN_PASSWORD";
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:$KAFKA_CLUSTER_ADMIN
allow.everyone.if.no.acl.found=false
log.dirs=$dir/data
num.partitions=3
default.replication.factor=3
min.insync.replicas=2
auto.create.topics.enable=false
offsets.topic.replication.factor=3
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
share.coordinator.state.topic.replication.factor=3
share.coordinator.state.topic.min.isr=2
group.initial.rebalance.delay.ms=0
EOF
    kafka_log4j "$dir"
    local java=(java "-Xms$KAFKA_CLUSTER_HEAP" "-Xmx$KAFKA_CLUSTER_HEAP" -XX:+UseG1GC -Djava.awt.headless=true
        -Dlog4j2.configurationFile="$dir/log4j2.properties" -cp "$libs/*")
    if [[ ! -f $dir/data/meta.properties ]]; then
        "${java[@]}" kafka.tools.StorageTool format --cluster-id="$(kafka_cluster_id)" -c "$dir/server.properties" \
            --add-scram "SCRAM-SHA-512=[name=\"$KAFKA_CLUSTER_ADMIN\",password=\"$KAFKA_CLUSTER_ADMIN_PASSWORD\"]" \
            --add-scram "SCRAM-SHA-512=[name=\"$KAFKA_CLUSTER_USER\",password=\"$KAFKA_CLUSTER_PASSWORD\"]" \
            >>"$(log_file "kafka-$n")" 2>&1 || {
            log_tail "kafka-$n"
            die "kafka-$n: formatting the log directory $dir/data failed"
        }
    fi
    # Each node runs in a cgroup (v2) of its own where the machine lets us make one (root), so
    # that a test can drop every packet it sends (tests/support/partition.rs): a node cut off
    # from the network. Without one, the node runs where the script does.
    local cgroup
    cgroup=$(kafka_node_cgroup "$n")
    [[ -n $cgroup ]] && mkdir -p "$cgroup" 2>/dev/null || cgroup=
    # shellcheck disable=SC2016 # $0 and $@ are the inner shell's
    spawn "kafka-$n" sh -c '[ -n "$0" ] && { echo $$ >"$0/cgroup.procs"; } 2>/dev/null; exec "$@"' \
        "$cgroup" "${java[@]}" kafka.Kafka "$dir/server.properties"
}

# The directory of node N's cgroup under the cgroup v2 root (empty without one), named by its
# port: `kubecast-kafka-PORT`, the path iptables' cgroup match takes.
kafka_node_cgroup() {
    local root
    root=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts 2>/dev/null)
    [[ -n $root && -w $root ]] && echo "$root/kubecast-kafka-$(kafka_node_port "$1")"
}

# The cluster's id, made once and shared by the three nodes' log directories.
kafka_cluster_id() {
    local f=$STATE/kafka-cluster.id
    if [[ ! -f $f ]]; then
        mkdir -p "$STATE"
        # 16 random bytes in URL-safe base64 without padding (see start_kafka).
        head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=' >"$f"
    fi
    cat "$f"
}

# The admin helper (scripts/stack.d/kafka_admin.py) on the cluster.
kafka_admin() {
    local py
    py=$(interop_python)
    KAFKA_CLUSTER_BOOTSTRAP=$(kafka_cluster_bootstrap) KAFKA_CLUSTER_ADMIN=$KAFKA_CLUSTER_ADMIN \
        KAFKA_CLUSTER_ADMIN_PASSWORD=$KAFKA_CLUSTER_ADMIN_PASSWORD \
        "$py" "$ROOT/scripts/stack.d/kafka_admin.py" "$@"
}

# Node N answers as a broker of the cluster (it has registered with the quorum).
check_kafka_node() { kafka_admin ready "$1" 2>/dev/null; }

kafka_node_ready() { wait_ready "kafka-$1" check_kafka_node "$1"; }

# Every partition of the cluster has its full ISR again (after a node came back): what an
# operator's rolling restart waits for before it takes the next node down.
kafka_cluster_in_sync() {
    local deadline=$((SECONDS + READY_TIMEOUT))
    until kafka_admin in-sync 2>/dev/null; do
        ((SECONDS < deadline)) || die "kafka-cluster: partitions still under-replicated after ${READY_TIMEOUT}s"
        sleep 0.5
    done
}

kafka_node_arg() {
    [[ ${1:-} =~ ^[123]$ ]] || die "kafka-cluster: expected a node number 1, 2 or 3, got '${1:-}'"
}

# Stops node N with SIGTERM and waits up to a minute: a controlled shutdown (leaders move
# off it first).
kafka_node_stop() { stop_component "kafka-$1" 60; }

kafka_node_kill() {
    local name=kafka-$1 pid
    is_running "$name" || return 0
    pid=$(<"$(pid_file "$name")")
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    rm -f "$(pid_file "$name")"
}

kafka_cluster_status() {
    local n state
    printf '%-24s %-6s %-9s %s\n' COMPONENT STATE VERSION ADDRESS
    for n in 1 2 3; do
        if ! is_running "kafka-$n"; then
            state=down
        elif check_kafka_node "$n"; then
            state=up
        else
            state=broken
        fi
        printf '%-24s %-6s %-9s %s\n' "kafka-$n" "$state" "$KAFKA_VERSION" "$HOST:$(kafka_node_port "$n")"
    done
}

cmd_kafka_cluster() {
    local n cg
    case ${1:-} in
    up)
        kafka_libs >/dev/null
        ensure_java
        for n in 1 2 3; do
            is_running "kafka-$n" && continue
            for port in $(kafka_node_port "$n") $(kafka_node_controller_port "$n"); do
                port_open "$port" && die "kafka-$n: port $HOST:$port is already in use"
            done
            start_kafka_node "$n"
        done
        for n in 1 2 3; do kafka_node_ready "$n"; done
        cmd_env >/dev/null
        kafka_cluster_status
        ;;
    down)
        # Its data goes too, so nothing is gained by a controlled shutdown (which, with the
        # quorum already gone, would wait for its timeout).
        for n in 3 2 1; do
            kafka_node_kill "$n"
            cg=$(kafka_node_cgroup "$n") && [[ -d $cg ]] && rmdir "$cg" 2>/dev/null
        done
        rm -rf "$STATE"/kafka-[123] "$STATE/kafka-cluster.id"
        ;;
    stop | start | kill)
        kafka_node_arg "${2:-}"
        case $1 in
        stop) kafka_node_stop "$2" ;;
        kill) kafka_node_kill "$2" ;;
        start)
            is_running "kafka-$2" || start_kafka_node "$2"
            kafka_node_ready "$2"
            ;;
        esac
        ;;
    in-sync) kafka_cluster_in_sync ;;
    status) kafka_cluster_status ;;
    acls) kafka_admin "$@" ;;
    *) die "usage: scripts/stack kafka-cluster up | down | status | stop N | start N | kill N | in-sync | acls grant|revoke|list" ;;
    esac
}
