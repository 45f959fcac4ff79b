# shellcheck shell=bash
# How each component of the test bed is configured, started, probed and asked its version.
# For a component NAME there are start_NAME, check_NAME (true when it really answers) and
# version_NAME. Sourced by scripts/stack.

# --- etcd -----------------------------------------------------------------------------------

start_etcd() {
    local bin
    bin=$(etcd_binary)
    mkdir -p "$STATE/etcd"
    # --unsafe-no-fsync as in controller-runtime's envtest: the test bed's etcd is thrown away
    # with the stack and is never the component whose crash a test studies.
    spawn etcd "$bin" --name kubecast --data-dir "$STATE/etcd/data" \
        --listen-client-urls "http://$HOST:$ETCD_PORT" --advertise-client-urls "http://$HOST:$ETCD_PORT" \
        --listen-peer-urls "http://$HOST:$ETCD_PEER_PORT" \
        --initial-advertise-peer-urls "http://$HOST:$ETCD_PEER_PORT" \
        --initial-cluster "kubecast=http://$HOST:$ETCD_PEER_PORT" \
        --unsafe-no-fsync --log-level warn
}

check_etcd() { curl -fsS --max-time 2 "http://$HOST:$ETCD_PORT/health" | grep -q '"health":"true"'; }

version_etcd() {
    curl -fsS --max-time 2 "http://$HOST:$ETCD_PORT/version" | sed -n 's/.*"etcdserver":"\([^"]*\)".*/\1/p'
}

# Compacts etcd up to its current revision, so that a watch from any older resourceVersion
# gets `410 Gone`. Prints the revision it compacted to.
etcd_compact() {
    local rev
    rev=$(curl -fsS --max-time 5 -X POST "http://$HOST:$ETCD_PORT/v3/kv/range" -d '{"key":"AA=="}' |
        sed -n 's/.*"revision":"\([0-9]*\)".*/\1/p')
    [[ -n $rev ]] || die "etcd: could not read the current revision from http://$HOST:$ETCD_PORT"
    curl -fsS --max-time 30 -X POST "http://$HOST:$ETCD_PORT/v3/kv/compaction" \
        -d "{\"revision\":\"$rev\",\"physical\":true}" >/dev/null ||
        die "etcd: compaction to revision $rev failed"
    echo "$rev"
}

# --- kube-apiserver -------------------------------------------------------------------------

PKI=$STATE/pki

# A CA, the apiserver's serving certificate for 127.0.0.1, the service-account signing key
# pair, and an admin client certificate in system:masters: what envtest sets up. Beside them,
# for the sinks' TLS tests: a serving certificate for 127.0.0.1 that Kafka's SSL listeners,
# Mosquitto's TLS listeners and the tests' HTTPS receivers present, a client certificate from
# the same CA, and a second CA ("other") with a client certificate of its own, which no
# listener trusts and which trusts no listener. Each file is made once, when missing.
ensure_pki() {
    [[ -f $PKI/other-client.crt ]] && return 0
    mkdir -p "$PKI"
    (
        cd "$PKI"
        ca() { # name subject
            [[ -f $1.crt ]] && return 0
            openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "$2" \
                -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
                -keyout "$1.key" -out "$1.crt"
        }
        issue() { # name subject extensions [ca]
            [[ -f $1.crt ]] && return 0
            local by=${4:-ca}
            openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$1.key" -out "$1.csr"
            openssl x509 -req -in "$1.csr" -CA "$by.crt" -CAkey "$by.key" -CAcreateserial -days 365 \
                -extfile <(printf '%s\n' "$3" "keyUsage=critical,digitalSignature,keyEncipherment") -out "$1.crt"
            rm -f "$1.csr"
        }
        ca ca "/CN=kubecast-local-ca"
        issue apiserver "/CN=kube-apiserver" \
            "$(printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth')"
        issue admin "/O=system:masters/CN=kubecast-admin" "extendedKeyUsage=clientAuth"
        [[ -f sa.key ]] || {
            openssl genrsa -out sa.key 2048
            openssl rsa -in sa.key -pubout -out sa.pub
        }
        issue tls-server "/CN=kubecast-local-sinks" \
            "$(printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth')"
        # Kafka reads its PEM keystore as one file: the key (PKCS#8) and then the certificate.
        cat tls-server.key tls-server.crt >tls-server.pem
        issue client "/CN=kubecast-sink" "extendedKeyUsage=clientAuth"
        ca other-ca "/CN=kubecast-other-ca"
        issue other-client "/CN=kubecast-untrusted-sink" "extendedKeyUsage=clientAuth" other-ca
    ) >>"$PKI/openssl.log" 2>&1 || {
        cat "$PKI/openssl.log" >&2
        rm -rf "$PKI"
        die "kube-apiserver: could not create certificates with openssl"
    }
}

# Written to a temporary file and renamed into place: the controllers, the scheduler and kwok
# start one after another, and each may be reading the file while the next one writes it.
write_kubeconfig() {
    local b64='base64 -w0'
    cat >"$STATE/kubeconfig.tmp.$$" <<EOF
# Written by scripts/stack: the local test bed's admin identity (system:masters).
apiVersion: v1
kind: Config
clusters:
  - name: kubecast-local
    cluster:
      server: https://$HOST:$APISERVER_PORT
      certificate-authority-data: $($b64 "$PKI/ca.crt")
users:
  - name: kubecast-admin
    user:
      client-certificate-data: $($b64 "$PKI/admin.crt")
      client-key-data: $($b64 "$PKI/admin.key")
contexts:
  - name: kubecast-local
    context:
      cluster: kubecast-local
      user: kubecast-admin
current-context: kubecast-local
EOF
    mv -f "$STATE/kubeconfig.tmp.$$" "$STATE/kubeconfig"
}

# The alpha features the stack's apiserver serves: server-side sharded list and watch
# (`shardSelector`), which kubecast's shards ask for.
FEATURE_GATES=${KUBECAST_STACK_FEATURE_GATES-ShardedListAndWatch=true}

# Starts the stack's kube-apiserver; with arguments NAME PORT GATES, another one over the same
# etcd (`scripts/stack apiserver PORT`), e.g. without the sharding gate, as an older
# apiserver would answer.
start_kube_apiserver() {
    local bin name=${1:-kube-apiserver} port=${2:-$APISERVER_PORT} gates=${3-$FEATURE_GATES}
    bin=$(kube_apiserver_binary)
    ensure_pki
    write_kubeconfig
    # ConfigMaps are served without a watch cache (straight from etcd), so that compacting etcd
    # alone (`scripts/stack compact etcd`) expires their old resourceVersions while every
    # other resource's watch cache still serves its recent history: a 410 for one resource.
    # The controller-manager runs no serviceaccount controller, so nothing would create the
    # `default` ServiceAccount that the ServiceAccount admission plugin insists on; and no
    # endpoint reconciler is needed.
    spawn "$name" "$bin" \
        --bind-address="$HOST" --advertise-address="$HOST" --secure-port="$port" \
        --etcd-servers="http://$HOST:$ETCD_PORT" --etcd-compaction-interval="$COMPACTION_INTERVAL" \
        --cert-dir="$STATE/$name/certs" ${gates:+--feature-gates="$gates"} \
        --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
        --client-ca-file="$PKI/ca.crt" \
        --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
        --service-account-issuer=https://kubernetes.default.svc.cluster.local \
        --authorization-mode=RBAC --allow-privileged=true \
        --watch-cache-sizes=configmaps#0 \
        --service-cluster-ip-range=10.0.0.0/24 --endpoint-reconciler-type=none \
        --disable-admission-plugins=ServiceAccount
}

kube_curl() {
    curl -fsS --max-time 3 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
        "https://$HOST:$APISERVER_PORT$1"
}

check_kube_apiserver() { [[ $(kube_curl /readyz) == ok ]]; }

# Another apiserver (`scripts/stack apiserver PORT`), named kube-apiserver-PORT.
check_kube_apiserver_port() {
    curl -fsS --max-time 3 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
        "https://$HOST:$1/readyz" | grep -qx ok
}

version_kube_apiserver() { kube_curl /version | sed -n 's/.*"gitVersion": *"\([^"]*\)".*/\1/p'; }

# --- kube-controller-manager ----------------------------------------------------------------

# The controllers of a real cluster that need no cloud: a Deployment really creates its
# ReplicaSets and Pods, scaling writes the controllers' core/v1 Events, Jobs and CronJobs run
# their course, deleted namespaces are emptied and finalized, owned objects are garbage
# collected, and, now that the simulated nodes of `scripts/stack nodes` heartbeat, the node
# lifecycle controller marks a node that stops `Unknown` and taints it, the taint eviction
# controller evicts its pods, and pod GC removes the pods of deleted nodes. Off: endpoints,
# service accounts and tokens, PV binding, TTL and the rest, which would touch what tests
# create or need a cloud.
CONTROLLERS=deployment-controller,replicaset-controller,statefulset-controller,daemonset-controller
CONTROLLERS+=,job-controller,cronjob-controller,namespace-controller,garbage-collector-controller
CONTROLLERS+=,node-lifecycle-controller,taint-eviction-controller,pod-garbage-collector-controller

start_kube_controller_manager() {
    local bin
    bin=$(kube_controller_manager_binary)
    ensure_pki
    write_kubeconfig
    spawn kube-controller-manager "$bin" \
        --kubeconfig="$STATE/kubeconfig" \
        --authentication-kubeconfig="$STATE/kubeconfig" --authorization-kubeconfig="$STATE/kubeconfig" \
        --bind-address="$HOST" --secure-port="$CONTROLLER_MANAGER_PORT" \
        --cert-dir="$STATE/kube-controller-manager/certs" \
        --controllers="$CONTROLLERS" --leader-elect=false \
        --use-service-account-credentials=false --concurrent-gc-syncs=5 \
        --kube-api-qps="$CLIENT_QPS" --kube-api-burst="$((CLIENT_QPS * 2))"
}

check_kube_controller_manager() {
    [[ $(curl -ksS --max-time 3 "https://$HOST:$CONTROLLER_MANAGER_PORT/healthz") == ok ]]
}

version_kube_controller_manager() { version_kube_apiserver; }

# --- Kafka ----------------------------------------------------------------------------------

# Writes DIR/log4j2.properties: INFO to the console (the component's log), state changes at
# WARN. Shared by the single broker and the cluster's nodes.
kafka_log4j() {
    cat >"$1/log4j2.properties" <<'EOF'
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = out
logger.state.name = state.change.logger
logger.state.level = warn
EOF
}

start_kafka() {
    local libs dir=$STATE/kafka
    libs=$(kafka_libs)
    ensure_java
    ensure_pki
    mkdir -p "$dir"
    # One broker in KRaft combined mode. Auto-created topics get several partitions so that
    # per-key ordering is really exercised; internal topics fit a single broker.
    cat >"$dir/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=$HOST:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://$HOST:$KAFKA_PORT,SASL://$HOST:$KAFKA_SASL_PORT,SSL://$HOST:$KAFKA_SSL_PORT,MTLS://$HOST:$KAFKA_MTLS_PORT,CONTROLLER://$HOST:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://$HOST:$KAFKA_PORT,SASL://$HOST:$KAFKA_SASL_PORT,SSL://$HOST:$KAFKA_SSL_PORT,MTLS://$HOST:$KAFKA_MTLS_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL:SASL_PLAINTEXT,SSL:SSL,MTLS:SSL
ssl.keystore.type=PEM
ssl.keystore.location=$PKI/tls-server.pem
ssl.truststore.type=PEM
ssl.truststore.location=$PKI/ca.crt
listener.name.mtls.ssl.client.auth=required
sasl.enabled.mechanisms=PLAIN
listener.name.sasl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$STACK_USER="$STACK_PASSWORD";
log.dirs=$dir/data
num.partitions=4
auto.create.topics.enable=true
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
EOF
    kafka_log4j "$dir"
    local java=(java -Xms256m -Xmx1g -XX:+UseG1GC -Djava.awt.headless=true
        -Dlog4j2.configurationFile="$dir/log4j2.properties" -cp "$libs/*")
    if [[ ! -f $dir/data/meta.properties ]]; then
        local cluster_id
        # A Kafka cluster id is 16 random bytes in URL-safe base64 without padding. It may
        # start with '-', so it is passed as `--cluster-id=ID`: as a separate argument the
        # tool's argument parser would take it for an option (one id in 64).
        cluster_id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')
        "${java[@]}" kafka.tools.StorageTool format --standalone --cluster-id="$cluster_id" \
            -c "$dir/server.properties" >>"$(log_file kafka)" 2>&1 || {
            log_tail kafka
            die "kafka: formatting the log directory $dir/data failed"
        }
    fi
    spawn kafka "${java[@]}" kafka.Kafka "$dir/server.properties"
}

check_kafka() { kcat -b "$HOST:$KAFKA_PORT" -L -m 2 | grep -q "broker 1 at $HOST:$KAFKA_PORT"; }

version_kafka() { sed -n 's/.*Kafka version: \([^ ]*\).*/\1/p' "$(log_file kafka)" | tail -n 1; }

# --- Mosquitto ------------------------------------------------------------------------------

start_mosquitto() {
    local dir=$STATE/mosquitto
    mkdir -p "$dir/data"
    ensure_pki
    # MQTT 3.1.1 and 5 on a loopback listener, persistence on, a second listener that
    # requires the stack's account, and two TLS listeners with the stack's serving
    # certificate, the second requiring a client certificate from the stack's CA. The queue
    # limits are raised so that a persistent subscriber that is away during a test gets every
    # QoS 1 message.
    rm -f "$dir/passwd"
    mosquitto_passwd -c -b "$dir/passwd" "$STACK_USER" "$STACK_PASSWORD" >/dev/null
    chmod 600 "$dir/passwd"
    cat >"$dir/mosquitto.conf" <<EOF
per_listener_settings true
listener $MQTT_PORT $HOST
allow_anonymous true
listener $MQTT_AUTH_PORT $HOST
allow_anonymous false
password_file $dir/passwd
listener $MQTT_TLS_PORT $HOST
allow_anonymous true
certfile $PKI/tls-server.crt
keyfile $PKI/tls-server.key
listener $MQTT_MTLS_PORT $HOST
allow_anonymous true
cafile $PKI/ca.crt
certfile $PKI/tls-server.crt
keyfile $PKI/tls-server.key
require_certificate true
persistence true
persistence_location $dir/data/
autosave_interval 5
max_queued_messages 1000000
max_inflight_messages 100
log_dest stderr
log_type error
log_type warning
log_type notice
log_timestamp_format %Y-%m-%dT%H:%M:%S
user $(id -un)
EOF
    spawn mosquitto mosquitto -c "$dir/mosquitto.conf"
}

check_mosquitto() {
    mosquitto_sub -h "$HOST" -p "$MQTT_PORT" -V mqttv5 -t '$SYS/broker/version' -C 1 -W 3 | grep -q mosquitto
}

version_mosquitto() {
    mosquitto_sub -h "$HOST" -p "$MQTT_PORT" -V mqttv5 -t '$SYS/broker/version' -C 1 -W 3 |
        sed -n 's/^mosquitto version //p'
}

# --- Alertmanager ---------------------------------------------------------------------------

# The webhook receiver both Alertmanagers notify: each notification, one JSON line, in
# $STATE/am-webhook/received.jsonl, with the path it came to (/alertmanager, /alertmanager-2).
start_am_webhook() {
    mkdir -p "$STATE/am-webhook"
    spawn am-webhook python3 "$ROOT/scripts/stack.d/am_webhook.py" "$HOST" "$AM_WEBHOOK_PORT" \
        "$STATE/am-webhook/received.jsonl"
}

check_am_webhook() { curl -fsS --max-time 2 "http://$HOST:$AM_WEBHOOK_PORT/healthz" | grep -q ok; }

version_am_webhook() { python3 -c 'import platform; print(platform.python_version())'; }

# One Alertmanager ($1: alertmanager or alertmanager-2, on port $2), not clustered
# (`--cluster.listen-address=`), grouping by alertname, cluster and namespace, and notifying
# the webhook receiver at /NAME, resolved alerts too.
start_alertmanager_named() { # name port
    local name=$1 port=$2 dir=$STATE/$1 bin
    bin=$(alertmanager_binary alertmanager)
    mkdir -p "$dir/data"
    cat >"$dir/alertmanager.yml" <<EOF
route:
  receiver: webhook
  group_by: [alertname, cluster, namespace]
  group_wait: 1s
  group_interval: 2s
  repeat_interval: 4h
receivers:
  - name: webhook
    webhook_configs:
      - url: http://$HOST:$AM_WEBHOOK_PORT/$name
        send_resolved: true
EOF
    spawn "$name" "$bin" --config.file="$dir/alertmanager.yml" --storage.path="$dir/data" \
        --web.listen-address="$HOST:$port" --cluster.listen-address= --log.level=warn
}

start_alertmanager() { start_alertmanager_named alertmanager "$ALERTMANAGER_PORT"; }
start_alertmanager_2() { start_alertmanager_named alertmanager-2 "$ALERTMANAGER_2_PORT"; }
check_alertmanager() { curl -fsS --max-time 2 "http://$HOST:$ALERTMANAGER_PORT/-/ready" >/dev/null; }
check_alertmanager_2() { curl -fsS --max-time 2 "http://$HOST:$ALERTMANAGER_2_PORT/-/ready" >/dev/null; }
am_version() { # port
    curl -fsS --max-time 2 "http://$HOST:$1/api/v2/status" | sed -n 's/.*"version":"\([^"]*\)".*/\1/p'
}
version_alertmanager() { am_version "$ALERTMANAGER_PORT"; }
version_alertmanager_2() { am_version "$ALERTMANAGER_2_PORT"; }
