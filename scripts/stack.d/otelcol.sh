# shellcheck shell=bash
# The OpenTelemetry Collector (scripts/go/otelcol, built from the builder's output): the OTLP
# receiver on loopback over HTTP ($OTLP_HTTP_PORT) and gRPC ($OTLP_GRPC_PORT), and the file
# exporter writing every request it accepted, as one OTLP/JSON line, to
# $STATE/otelcol/received.jsonl, which the tests read.

# The Collector's release: its otelcol module's version.
otelcol_version() { awk '$1 == "go.opentelemetry.io/collector/otelcol" { print $2; exit }' "$ROOT/scripts/go/otelcol/go.mod"; }

otelcol_binary() {
    build_go_binary otelcol "$ROOT/scripts/go/otelcol" . "$(otelcol_version)" "-s -w"
}

# The Collector with the contrib k8sobjects receiver, started by the tests and benchmarks
# that compare kubecast with it (`scripts/stack tool otelcol-k8sobjects`).
otelcol_k8sobjects_binary() {
    build_go_binary otelcol-k8sobjects "$ROOT/scripts/go/otelcol-k8sobjects" . \
        "$(awk '$1 == "github.com/open-telemetry/opentelemetry-collector-contrib/receiver/k8sobjectsreceiver" { print $2; exit }' \
            "$ROOT/scripts/go/otelcol-k8sobjects/go.mod")" "-s -w"
}

start_otelcol() {
    local dir=$STATE/otelcol bin
    bin=$(otelcol_binary)
    mkdir -p "$dir"
    cat >"$dir/config.yaml" <<EOF
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: $HOST:$OTLP_GRPC_PORT
      http:
        endpoint: $HOST:$OTLP_HTTP_PORT
exporters:
  file:
    path: $dir/received.jsonl
    format: json
    flush_interval: 100ms
    append: true
service:
  telemetry:
    logs:
      level: warn
    metrics:
      level: none
  pipelines:
    logs:
      receivers: [otlp]
      exporters: [file]
EOF
    spawn otelcol "$bin" --config="$dir/config.yaml"
}

# An empty export request is a valid one: the receiver answers 200 once its pipeline runs.
check_otelcol() {
    curl -fsS --max-time 2 -H 'Content-Type: application/json' -d '{}' \
        "http://$HOST:$OTLP_HTTP_PORT/v1/logs" >/dev/null
}

version_otelcol() { otelcol_version; }
