# shellcheck shell=bash
# Kueue beside the control plane (e2e/cluster up --with-kueue).
# Sourced by e2e/cluster, whose globals and helpers it uses.

# kueue_wanted: Kueue was asked for, by this command or by an earlier 'up --with-kueue' (until down).
kueue_wanted() { ((WITH_KUEUE)) || [[ -f $KUEUE_MARKER ]]; }

# kueue_bin_dir: the directory of the kueue binary (built and cached by e2e/tools/kueue/build.sh);
# its CRDs are in ../crds from there.
kueue_bin_dir() {
  local dir
  dir=$("$REPO_ROOT/e2e/tools/kueue/build.sh") || die "e2e/tools/kueue/build.sh failed"
  [[ -x $dir/kueue ]] || die "missing binary $dir/kueue"
  compgen -G "$dir/../crds/*.yaml" >/dev/null || die "missing Kueue's CRDs in $dir/../crds"
  echo "$dir"
}

# kueue_certs: the self-signed certificate of Kueue's webhook server, and a copy of it where Kueue
# looks for its metrics serving certificate (only when nothing is there yet).
kueue_certs() {
  local certs=$KUEUE_DIR/certs
  mkdir -p "$certs"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj /CN=kueue \
    -addext subjectAltName=IP:127.0.0.1 -keyout "$certs/tls.key" -out "$certs/tls.crt" 2>/dev/null ||
    die "openssl failed while generating Kueue's certificate in $certs"
  chmod 600 "$certs/tls.key"
  [[ -f $KUEUE_METRICS_CERTS/tls.crt && -f $KUEUE_METRICS_CERTS/tls.key ]] && return 0
  { mkdir -p "$KUEUE_METRICS_CERTS" && cp "$certs/tls.crt" "$certs/tls.key" "$KUEUE_METRICS_CERTS/"; } 2>/dev/null ||
    die "cannot write $KUEUE_METRICS_CERTS/tls.{crt,key}: with its internal certificate management off, Kueue reads its metrics serving certificate from that fixed path (no flag or configuration field moves it) and exits without it; run this once as root, or put a certificate and key there yourself"
}

# start_kueue BIN: apply Kueue's CRDs, write its configuration and start it (the rest of the
# cluster must be running); waits until its /readyz answers ok.
start_kueue() {
  local kbin=$1 start deadline kc=$KUBECONFIGS/kueue.kubeconfig crds
  local -a ports extra=()
  start=$(now_ms)
  load_ports || die "no cluster in $DIR (missing $PORTS_ENV)"
  crds=$(cd "$kbin/../crds" && pwd)
  mkdir -p "$KUEUE_DIR" "$KUBECONFIGS"
  write_kubeconfig "$kc" admin
  # Kueue exits ("no matches for kind Workload") when it starts before its CRDs are established.
  # Server-side: the Workload CRD is too large for client-side apply's annotation.
  log "applying Kueue's CRDs ($crds)"
  local out
  out=$("$KUBECTL" --kubeconfig "$kc" --request-timeout=60s apply --server-side --force-conflicts \
    -f "$crds" 2>&1) || die "could not apply Kueue's CRDs from $crds: $out"
  out=$("$KUBECTL" --kubeconfig "$kc" wait --for condition=established --timeout=60s -f "$crds" 2>&1) ||
    die "Kueue's CRDs did not become established: $out"
  kueue_certs

  read -r -a ports <<<"$(pick_ports 3)"
  KUEUE_HEALTH_PORT=${ports[0]} KUEUE_METRICS_PORT=${ports[1]} KUEUE_WEBHOOK_PORT=${ports[2]}
  { grep -v '^KUEUE_' "$PORTS_ENV" || true
    printf 'KUEUE_HEALTH_PORT=%s\nKUEUE_METRICS_PORT=%s\nKUEUE_WEBHOOK_PORT=%s\nKUEUE_BIN_DIR=%s\n' \
      "$KUEUE_HEALTH_PORT" "$KUEUE_METRICS_PORT" "$KUEUE_WEBHOOK_PORT" "$kbin"
  } >"$PORTS_ENV.tmp"
  mv "$PORTS_ENV.tmp" "$PORTS_ENV"
  # No webhook configurations are registered: Kueue's Workload defaulting does nothing for
  # v1beta2 Workloads and the operator writes complete ones, so the API server never calls Kueue;
  # its webhook server only has to start (readyz waits for it).
  cat >"$KUEUE_DIR/config.yaml" <<EOF
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
health:
  healthProbeBindAddress: 127.0.0.1:$KUEUE_HEALTH_PORT
metrics:
  bindAddress: 127.0.0.1:$KUEUE_METRICS_PORT
webhook:
  port: $KUEUE_WEBHOOK_PORT
  host: 127.0.0.1
  certDir: $KUEUE_DIR/certs
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
integrations:
  frameworks: []
  externalFrameworks:
  - "TPUJob.v1alpha1.tpujob.dev"
multiKueue:
  externalFrameworks:
  - name: "TPUJob.v1alpha1.tpujob.dev"
EOF
  mapfile -d '' -t extra < <(extra_args TPUJOB_E2E_KUEUE_ARGS)
  # --config mentions DIR, so stop_all (down) finds the process.
  mkdir -p "$ARGS" "$LOGS" "$PIDS"
  write_args kueue "$kbin/kueue" --config="$KUEUE_DIR/config.yaml" --kubeconfig="$kc" \
    --feature-gates=VisibilityOnDemand=false "${extra[@]}"
  log "starting kueue (health 127.0.0.1:$KUEUE_HEALTH_PORT, webhook 127.0.0.1:$KUEUE_WEBHOOK_PORT)"
  launch kueue
  deadline=$(($(now_ms) + 60000))
  wait_healthy "$deadline" kueue kueue kube-apiserver
  # Requested from now on (until down); a Kueue that never came up is not asked for again.
  : >"$KUEUE_MARKER"
  log "kueue ready in $(($(now_ms) - start)) ms"
}

# add_kueue: start Kueue on a running cluster (restarting a Kueue that runs but is not ready); a
# failure stops Kueue only.
add_kueue() {
  local kbin
  kbin=$(kueue_bin_dir)
  running kueue && kill_component kueue
  trap 'kueue_failed' EXIT
  start_kueue "$kbin"
  trap - EXIT
}

kueue_failed() {
  local rc=$? pid
  trap - EXIT
  ((rc == 0)) && rc=1
  log "starting kueue failed; stopping it (the rest keeps running; log: $LOGS/kueue.log)"
  pid=$(pid_of kueue)
  [[ -n $pid ]] && mentions_dir "$pid" && terminate "${TPUJOB_E2E_STOP_GRACE:-5}" "$pid"
  rm -f "$PIDS/kueue.pid"
  exit "$rc"
}
