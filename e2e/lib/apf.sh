# shellcheck shell=bash
# A tight API Priority and Fairness configuration (e2e/cluster apf-tight, apf-reset).
# Sourced by e2e/cluster, whose globals and helpers it uses.

APF_NAME=tpujob-e2e-tight
APF_STATE=$DIR/apf-tight

kubectl_admin() { "$KUBECTL" --kubeconfig "$ADMIN_KUBECONFIG" --request-timeout=20s "$@"; }

# apf_subject SUBJECT: sets APF_SUBJECT_YAML (the FlowSchema subject) and APF_IMPERSONATE (curl
# arguments making a request as that subject).
apf_subject() {
  local spec=$1 kind name ns
  kind=${spec%%:*}
  name=${spec#*:}
  [[ $spec == *:* && -n $name ]] || die "bad --subject '$spec' (want user:NAME, group:NAME or serviceaccount:NAMESPACE/NAME)"
  case $kind in
    user)
      APF_SUBJECT_YAML="- kind: User
      user: {name: \"$name\"}"
      APF_IMPERSONATE=(-H "Impersonate-User: $name") ;;
    group)
      APF_SUBJECT_YAML="- kind: Group
      group: {name: \"$name\"}"
      APF_IMPERSONATE=(-H "Impersonate-User: tpujob-e2e-apf-probe" -H "Impersonate-Group: $name") ;;
    serviceaccount)
      ns=${name%%/*}
      name=${name#*/}
      [[ $spec == */* && -n $ns && -n $name ]] || die "bad --subject '$spec' (want serviceaccount:NAMESPACE/NAME)"
      APF_SUBJECT_YAML="- kind: ServiceAccount
      serviceAccount: {namespace: \"$ns\", name: \"$name\"}"
      [[ $name == '*' ]] && name=tpujob-e2e-apf-probe
      APF_IMPERSONATE=(-H "Impersonate-User: system:serviceaccount:$ns:$name"
        -H "Impersonate-Group: system:serviceaccounts" -H "Impersonate-Group: system:serviceaccounts:$ns"
        -H "Impersonate-Group: system:authenticated") ;;
    *) die "bad --subject '$spec' (want user:NAME, group:NAME or serviceaccount:NAMESPACE/NAME)" ;;
  esac
}

cmd_apf_tight() {
  local start inflight mutating shares uid headers seats deadline
  start=$(now_ms)
  [[ -n $APF_SUBJECT ]] || die "apf-tight needs --subject (see --help)"
  load_ports || die "no cluster in $DIR (missing $PORTS_ENV); run up first"
  [[ -f $ARGS/kube-apiserver ]] || die "no recorded kube-apiserver flags in $ARGS; run up first"
  running etcd || die "etcd is not running; run up"
  apf_subject "$APF_SUBJECT"
  inflight=${TPUJOB_E2E_APF_MAX_REQUESTS_INFLIGHT:-20}
  mutating=${TPUJOB_E2E_APF_MAX_MUTATING_REQUESTS_INFLIGHT:-10}
  shares=${TPUJOB_E2E_APF_SHARES:-1}
  [[ $inflight =~ ^[0-9]+$ && $mutating =~ ^[0-9]+$ && $shares =~ ^[0-9]+$ ]] ||
    die "TPUJOB_E2E_APF_* must be whole numbers"

  # The normal flags are kept aside once; the tight ones are them plus the limits (the last
  # occurrence of a flag wins).
  [[ -f $ARGS/kube-apiserver.normal ]] || cp "$ARGS/kube-apiserver" "$ARGS/kube-apiserver.normal"
  { cat "$ARGS/kube-apiserver.normal"
    printf '%s\0' "--max-requests-inflight=$inflight" "--max-mutating-requests-inflight=$mutating"
  } >"$ARGS/kube-apiserver.tmp"
  mv "$ARGS/kube-apiserver.tmp" "$ARGS/kube-apiserver"
  printf '%s\n' "$APF_SUBJECT" >"$APF_STATE"
  log "restarting kube-apiserver with --max-requests-inflight=$inflight --max-mutating-requests-inflight=$mutating"
  kill_apiserver
  start_apiserver

  kubectl_admin apply -f - >&2 <<YAML || die "could not create the APF objects"
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata:
  name: $APF_NAME
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: $shares
    lendablePercent: 0
    borrowingLimitPercent: 0
    limitResponse:
      type: Reject
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata:
  name: $APF_NAME
spec:
  priorityLevelConfiguration:
    name: $APF_NAME
  matchingPrecedence: 300
  distinguisherMethod:
    type: ByUser
  rules:
  - subjects:
    $APF_SUBJECT_YAML
    resourceRules:
    - verbs: ["*"]
      apiGroups: ["*"]
      resources: ["*"]
      clusterScope: true
      namespaces: ["*"]
    nonResourceRules:
    - verbs: ["*"]
      nonResourceURLs: ["*"]
YAML
  uid=$(kubectl_admin get flowschema "$APF_NAME" -o jsonpath='{.metadata.uid}') || die "no FlowSchema $APF_NAME"
  # The API server classifies with the objects once its configuration controller has seen them:
  # wait until a request made as the subject is matched by the FlowSchema (the response names it
  # by UID, whatever the request's outcome).
  deadline=$(($(now_ms) + 30000))
  while :; do
    headers=$(curl_api -o /dev/null -D - "${APF_IMPERSONATE[@]}" \
      "https://127.0.0.1:$APISERVER_PORT/api/v1/namespaces/default/configmaps?limit=1" 2>/dev/null || true)
    grep -qi "^x-kubernetes-pf-flowschema-uid: *$uid" <<<"$headers" && break
    (($(now_ms) < deadline)) || die "requests as $APF_SUBJECT are not classified by FlowSchema $APF_NAME ($uid): $headers"
    sleep 0.1
  done
  seats=$(curl_api "https://127.0.0.1:$APISERVER_PORT/metrics" 2>/dev/null |
    sed -n "s/^apiserver_flowcontrol_nominal_limit_seats{priority_level=\"$APF_NAME\"} //p" || true)
  log "APF tight in $(($(now_ms) - start)) ms: $APF_SUBJECT -> priority level $APF_NAME (${seats:-?} seat(s), Reject)"
}

cmd_apf_reset() {
  local start restored=0
  start=$(now_ms)
  load_ports || die "no cluster in $DIR (missing $PORTS_ENV); run up first"
  if [[ -f $ARGS/kube-apiserver.normal ]]; then
    mv "$ARGS/kube-apiserver.normal" "$ARGS/kube-apiserver"
    restored=1
  fi
  if ((restored)) && running kube-apiserver; then
    log "restarting kube-apiserver with its normal flags"
    kill_apiserver
  fi
  running kube-apiserver || start_apiserver
  kubectl_admin delete "flowschema/$APF_NAME" "prioritylevelconfiguration/$APF_NAME" \
    --ignore-not-found >&2 || die "could not delete the APF objects"
  rm -f "$APF_STATE"
  log "APF back to normal in $(($(now_ms) - start)) ms"
}
