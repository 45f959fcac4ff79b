# shellcheck shell=bash
# Installs the tools the test bed needs and builds or fetches its servers into the cache
# ($CACHE, outside the repository), keyed by version and by the inputs of the build, so a
# second `up` on the same machine reuses them. Sourced by scripts/stack.

SUDO=
[[ $(id -u) == 0 ]] || SUDO=sudo
APT_UPDATED=

# Installs the Debian packages among its arguments that are not installed yet.
ensure_apt() {
    local p missing=() started=$SECONDS
    for p; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    ((${#missing[@]} == 0)) && return 0
    command -v apt-get >/dev/null ||
        die "missing Debian packages: ${missing[*]}; this script installs them with apt-get, which this machine lacks"
    mkdir -p "$CACHE"
    log "installing Debian packages: ${missing[*]} (apt-get install; log in $CACHE/apt.log)"
    if [[ -z $APT_UPDATED ]]; then
        $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq >>"$CACHE/apt.log" 2>&1 ||
            die "apt-get update failed; see $CACHE/apt.log"
        APT_UPDATED=1
    fi
    # The lock timeout: scripts/test installs the tests' packages while the stack builds, and
    # the stack may install one of its own meanwhile.
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
        --no-install-recommends "${missing[@]}" \
        >>"$CACHE/apt.log" 2>&1 || {
        tail -n 20 "$CACHE/apt.log" >&2
        die "apt-get install ${missing[*]} failed; see $CACHE/apt.log"
    }
    log "installed ${missing[*]} in $((SECONDS - started))s"
}

# The packages every part of the stack script relies on.
ensure_base_tools() {
    ensure_apt ca-certificates curl openssl iproute2 mosquitto mosquitto-clients kcat
}

go_is_recent() {
    local v
    v=$("$1" env GOVERSION 2>/dev/null) || return 1
    [[ $v =~ ^go1\.([0-9]+) ]] && ((BASH_REMATCH[1] >= 26))
}

# Sets GO to a Go 1.26+ command. Without one on PATH, installs Debian's golang-go and uses it
# only to download the official $GO_TOOLCHAIN toolchain, which the Go module proxy serves as
# the module golang.org/toolchain.
ensure_go() {
    [[ -n ${GO:-} ]] && return 0
    if command -v go >/dev/null && go_is_recent go; then
        GO=go
        return 0
    fi
    local cached=$CACHE/go/$GO_TOOLCHAIN
    if [[ ! -x $cached/bin/go ]]; then
        log "go: no Go 1.26 or newer on PATH; fetching the $GO_TOOLCHAIN toolchain through the Go module proxy"
        command -v go >/dev/null || ensure_apt golang-go
        local tmp dir arch
        tmp=$(mktemp -d)
        arch=$(dpkg --print-architecture)
        dir=$(cd "$tmp" && GOPATH=$tmp/gopath GOFLAGS=-modcacherw GOTOOLCHAIN=local \
            go mod download -json "golang.org/toolchain@v0.0.1-$GO_TOOLCHAIN.linux-$arch" |
            sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p') || true
        [[ -n $dir && -f $dir/bin/go ]] || die "go: could not download golang.org/toolchain@v0.0.1-$GO_TOOLCHAIN.linux-$arch"
        mkdir -p "$CACHE/go"
        rm -rf "$cached"
        cp -r "$dir" "$cached"
        rm -rf "$tmp"
        # Module zips carry no file modes; the toolchain's commands need their execute bit.
        chmod -R u+w "$cached"
        chmod +x "$cached"/bin/* "$cached"/pkg/tool/*/*
    fi
    GO=$cached/bin/go
}

# The cache key of a module in scripts/go/: a digest of go.mod, go.sum and the module's own
# Go files (if it has any).
module_key() { # module
    local sources
    sources=$(find "$1" -maxdepth 1 -name '*.go' | sort)
    # shellcheck disable=SC2086 # the file names hold no spaces
    cat "$1/go.mod" "$1/go.sum" $sources | sha256sum | cut -c1-12
}

# Runs `go build` in a module of scripts/go/ into OUT (a file for one package, a directory
# for several), logging to LOG, then says how long it took.
go_build_into() { # name module log out ldflags package...
    local name=$1 module=$2 log=$3 out=$4 ldflags=$5 started=$SECONDS
    shift 5
    ensure_go
    mkdir -p "$CACHE/bin"
    log "$name: building $* with $("$GO" env GOVERSION) (first time on this machine, minutes; log in $log)"
    if ! (cd "$module" && GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false" \
        "$GO" build -trimpath -ldflags "$ldflags" -o "$out" "$@") >"$log" 2>&1; then
        tail -n 30 "$log" >&2
        die "$name: go build failed; full log in $log"
    fi
    log "$name: built in $((SECONDS - started))s"
}

# Builds a Go command from one of the project's small modules in scripts/go/ and prints the
# cached binary's path, keyed by the version and the module.
build_go_binary() { # name module pkg version ldflags
    local name=$1 module=$2 pkg=$3 version=$4 ldflags=$5 out
    out=$CACHE/bin/$name-$version-$(module_key "$module")
    if [[ ! -x $out ]]; then
        go_build_into "$name" "$module" "$out.log" "$out.tmp" "$ldflags" "$pkg"
        mv "$out.tmp" "$out"
    fi
    echo "$out"
}

# Builds several Go commands of one module with one `go build`, so that the packages they
# share are compiled once (and two links run at a time), into a cached directory, and
# prints its path.
build_go_commands() { # name module version ldflags package...
    local name=$1 module=$2 version=$3 ldflags=$4 out
    shift 4
    out=$CACHE/bin/$name-$version-$(module_key "$module")
    if [[ ! -d $out ]]; then
        rm -rf "$out.tmp"
        mkdir -p "$out.tmp"
        go_build_into "$name" "$module" "$out.log" "$out.tmp/" "$ldflags" "$@"
        mv "$out.tmp" "$out"
    fi
    echo "$out"
}

etcd_binary() {
    build_go_binary etcd "$ROOT/scripts/go/etcd" go.etcd.io/etcd/server/v3 "$ETCD_VERSION" "-s -w"
}

# The -X flags upstream's release build stamps into Kubernetes commands, so that /version and
# `kubectl version` report the release rather than v0.0.0.
k8s_version_ldflags() {
    local v=${K8S_VERSION#v} p flags="-s -w"
    for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        flags+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=${v%%.*} -X $p.gitMinor=$(cut -d. -f2 <<<"$v")"
        flags+=" -X $p.gitTreeState=clean"
    done
    echo "$flags"
}

# kube-apiserver, kube-controller-manager (so that Deployments really create ReplicaSets and
# Pods, and namespaces really finish deleting), kube-scheduler (it binds the pods of
# `scripts/stack nodes`' simulated nodes, with upstream's default profile) and kubectl
# (`scripts/stack env` puts it on PATH, so a newcomer can change pods by hand): one
# Kubernetes release, built together from scripts/go/kubernetes. Prints the command's path.
kubernetes_binary() { # command
    local dir
    dir=$(build_go_commands kubernetes "$ROOT/scripts/go/kubernetes" "$K8S_VERSION" "$(k8s_version_ldflags)" \
        k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
        k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl)
    [[ -x $dir/$1 ]] || die "kubernetes: no $1 in $dir"
    echo "$dir/$1"
}

kube_apiserver_binary() { kubernetes_binary kube-apiserver; }
kube_controller_manager_binary() { kubernetes_binary kube-controller-manager; }
kube_scheduler_binary() { kubernetes_binary kube-scheduler; }
kubectl_binary() { kubernetes_binary kubectl; }

# kwok plays the kubelets of the simulated nodes (scripts/stack nodes): heartbeats, pod
# status, graceful termination, as its stages in scripts/kwok/ say.
kwok_binary() {
    build_go_binary kwok "$ROOT/scripts/go/kwok" sigs.k8s.io/kwok/cmd/kwok "$KWOK_VERSION" \
        "-s -w"
}

# Prometheus Alertmanager and amtool, built together from scripts/go/alertmanager. Prints the
# command's path.
alertmanager_binary() { # command
    local dir
    dir=$(build_go_commands alertmanager "$ROOT/scripts/go/alertmanager" "$ALERTMANAGER_VERSION" \
        "-s -w -X github.com/prometheus/common/version.Version=${ALERTMANAGER_VERSION#v}" \
        github.com/prometheus/alertmanager/cmd/alertmanager github.com/prometheus/alertmanager/cmd/amtool)
    [[ -x $dir/$1 ]] || die "alertmanager: no $1 in $dir"
    echo "$dir/$1"
}

# Helm and kustomize render deploy/ in tests/deploy_manifests.rs, compose-config checks
# docker-compose.yml in tests/compose.rs; only scripts/test needs them.
helm_binary() {
    build_go_binary helm "$ROOT/scripts/go/helm" helm.sh/helm/v4/cmd/helm "$HELM_VERSION" \
        "-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION"
}

compose_config_binary() {
    build_go_binary compose-config "$ROOT/scripts/go/compose-config" . "$COMPOSE_GO_VERSION" "-s -w"
}

# The CloudEvents Go SDK's HTTP receiver (scripts/go/ce-receiver), which the HTTP sink's tests
# and benchmarks send to.
ce_receiver_binary() {
    build_go_binary ce-receiver "$ROOT/scripts/go/ce-receiver" . \
        "$(awk '$1 == "require" && $2 == "github.com/cloudevents/sdk-go/v2" { print $3; exit }' \
            "$ROOT/scripts/go/ce-receiver/go.mod")" "-s -w"
}

kustomize_binary() {
    build_go_binary kustomize "$ROOT/scripts/go/kustomize" sigs.k8s.io/kustomize/kustomize/v5 \
        "$KUSTOMIZE_VERSION" "-s -w"
}

# The official AsyncAPI parser (npm), which tests/asyncapi.rs validates schemas/asyncapi.yaml
# with: `npm ci` of tests/asyncapi/package-lock.json into the cache, keyed by the lock file.
# Prints the directory holding its node_modules.
asyncapi_parser_binary() {
    local lock=$ROOT/tests/asyncapi/package-lock.json key out tmp
    key=$(sha256sum "$lock" | cut -c1-12)
    out=$CACHE/node/asyncapi-parser-$key
    if [[ ! -d $out/node_modules/@asyncapi/parser ]]; then
        command -v npm >/dev/null || ensure_apt nodejs npm
        log "asyncapi-parser: installing @asyncapi/parser with npm ci (first time on this machine; log in $out.log)"
        mkdir -p "$CACHE/node"
        tmp=$(mktemp -d "$CACHE/node/.install.XXXXXX")
        cp "$ROOT/tests/asyncapi/package.json" "$lock" "$tmp/"
        if ! (cd "$tmp" && npm ci --no-audit --no-fund --ignore-scripts) >"$out.log" 2>&1; then
            tail -n 20 "$out.log" >&2
            rm -rf "$tmp"
            die "asyncapi-parser: npm ci failed; full log in $out.log"
        fi
        rm -rf "$out"
        mv "$tmp" "$out"
    fi
    echo "$out"
}

ensure_java() {
    local v
    if ! command -v java >/dev/null; then
        log "java: not found; installing Debian's openjdk-17-jre-headless"
        ensure_apt openjdk-17-jre-headless
    fi
    v=$(java -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')
    ((${v%%.*} >= 17)) || die "java: Kafka $KAFKA_VERSION needs Java 17 or newer, found $v; install openjdk-17-jre-headless"
}

# Prints the directory holding the Kafka broker's jars, fetching them with mvn on first use.
kafka_libs() {
    local pom=$ROOT/scripts/kafka/pom.xml key dir started=$SECONDS
    key=$(sha256sum "$pom" | cut -c1-12)
    dir=$CACHE/kafka-$KAFKA_VERSION-$key
    if [[ ! -f $dir/complete ]]; then
        command -v mvn >/dev/null || {
            log "mvn: not found; installing Debian's maven"
            ensure_apt maven
        }
        log "kafka: fetching org.apache.kafka:kafka_2.13:$KAFKA_VERSION and its runtime dependencies with mvn (log in $dir.log)"
        rm -rf "$dir.tmp"
        mkdir -p "$CACHE"
        if ! mvn -B -f "$pom" -Dkafka.version="$KAFKA_VERSION" dependency:copy-dependencies \
            -DincludeScope=runtime -DoutputDirectory="$dir.tmp/libs" >"$dir.log" 2>&1; then
            grep -E 'ERROR|FAIL' "$dir.log" | tail -n 15 >&2
            die "kafka: mvn could not fetch the broker's jars; full log in $dir.log"
        fi
        touch "$dir.tmp/complete"
        rm -rf "$dir"
        mv "$dir.tmp" "$dir"
        log "kafka: jars fetched in $((SECONDS - started))s"
    fi
    echo "$dir/libs"
}

# Prints the python of a cached venv holding the interop suite's clients
# (tests/interop/requirements.txt), creating it on first use. The key is the file's digest.
interop_python() {
    local req=$ROOT/tests/interop/requirements.txt key dir
    key=$(sha256sum "$req" | cut -c1-12)
    dir=$CACHE/venv-interop-$key
    if [[ ! -f $dir/complete ]]; then
        command -v python3 >/dev/null || ensure_apt python3
        rm -rf "$dir"
        mkdir -p "$CACHE"
        log "interop: creating a Python venv with tests/interop/requirements.txt (log in $dir.log)"
        if ! python3 -m venv "$dir" >"$dir.log" 2>&1; then
            ensure_apt python3-venv
            python3 -m venv "$dir" >"$dir.log" 2>&1 || die "interop: python3 -m venv failed; see $dir.log"
        fi
        "$dir/bin/python" -m pip install -q --disable-pip-version-check -r "$req" >>"$dir.log" 2>&1 || {
            tail -n 20 "$dir.log" >&2
            die "interop: pip could not install tests/interop/requirements.txt; see $dir.log"
        }
        touch "$dir/complete"
    fi
    echo "$dir/bin/python"
}
