# shellcheck shell=bash
# The blackhole proxy in front of the API server (e2e/cluster proxy, blackhole, unblackhole).
# Sourced by e2e/cluster, whose globals and helpers it uses.

PROXY_KUBECONFIG=$DIR/proxy.kubeconfig

cmd_proxy() {
  load_ports || die "no cluster in $DIR (missing $PORTS_ENV); run up first"
  running kube-apiserver || die "kube-apiserver is not running; run up"
  if ! running proxy; then
    local port i
    port=$(pick_ports 1)
    rm -f "$DIR/proxy.state"
    printf '%s\0' python3 "$REPO_ROOT/e2e/lib/blackhole_proxy.py" "$port" 127.0.0.1 \
      "$APISERVER_PORT" "$DIR" >"$ARGS/proxy"
    launch proxy
    for ((i = 0; i < 250; i++)); do
      [[ -f $DIR/proxy.state && -n $(ss -Hltn "sport = :$port" 2>/dev/null) ]] && break
      sleep 0.02
    done
    [[ -n $(ss -Hltn "sport = :$port" 2>/dev/null) ]] ||
      die "the proxy did not listen on $port: $(tail -n 5 "$LOGS/proxy.log" 2>/dev/null)"
    sed "s#https://127.0.0.1:$APISERVER_PORT#https://127.0.0.1:$port#" "$ADMIN_KUBECONFIG" \
      >"$PROXY_KUBECONFIG.tmp"
    mv "$PROXY_KUBECONFIG.tmp" "$PROXY_KUBECONFIG"
    log "proxy on 127.0.0.1:$port in front of the API server (127.0.0.1:$APISERVER_PORT)"
  fi
  echo "$PROXY_KUBECONFIG"
}

# proxy_signal SIGNAL STATE: signal the proxy and wait until its state file says STATE.
proxy_signal() {
  local i
  running proxy || die "no proxy running in $DIR; run proxy first"
  kill "-$1" "$(pid_of proxy)"
  for ((i = 0; i < 250; i++)); do
    [[ $(cat "$DIR/proxy.state" 2>/dev/null) == "$2" ]] && { log "proxy: $2"; return 0; }
    sleep 0.02
  done
  die "the proxy did not switch to $2"
}
