# tools/cluster_wan.sh: the WAN between the sites of an emulated cluster (sourced by tools/cluster,
# which documents the layout). Every site's bridge holds a tap `wan0` plugged into a userspace
# vde_switch; Debian's vde `wirefilter` joins two switches and delays, rate-limits, drops and jitters
# the frames between them. Daemons and their pid files live in $STATE_DIR/$PREFIX.d.
#
# Reads: PREFIX, STATE_DIR, SITES, WAN_RATE, WAN_DELAY, WAN_LOSS, WAN_JITTER (as given) and sets
# WAN_BPS, WAN_DELAY_MS, WAN_JITTER_MS in wan_check_args.

wan_dir() { echo "$STATE_DIR/$PREFIX.d"; }

# The vde daemons pass frames as unix datagrams, and a unix socket queues only
# net.unix.max_dgram_qlen datagrams (10 on this machine's host namespace): a burst of a TCP window
# would be dropped there, before the emulated link. The sysctl is per network namespace, read
# when a socket is made, so the switches and wirefilters run in a namespace of their own
# (PREFIX-w) and the site namespaces (where vde_plug2tap runs) get the same long queue; the host's
# setting stays.
WAN_QLEN=8192
wan_ns() { echo "$PREFIX-w"; }
in_wan() { ip netns exec "$(wan_ns)" "$@"; }

wan_check_args() {
  if ((SITES == 1)); then
    [[ -z $WAN_RATE && -z $WAN_DELAY && $WAN_LOSS == 0 && $WAN_JITTER == 0 ]] ||
      die "--wan-rate, --wan-delay, --wan-loss and --wan-jitter need --sites 2 or more"
    return 0
  fi
  for tool in vde_switch vde_plug2tap wirefilter; do
    command -v $tool >/dev/null || die "'$tool' not found: sites need Debian's vde2 (install it: scripts/setup)"
  done
  [[ -n $WAN_RATE ]] || die "--sites $SITES needs --wan-rate (e.g. 100mbit)"
  [[ -n $WAN_DELAY ]] || die "--sites $SITES needs --wan-delay (one way, e.g. 25ms for a 50 ms round trip)"
  WAN_BPS=$(rate_bps --wan-rate "$WAN_RATE")
  ((WAN_BPS >= 8000)) || die "--wan-rate '$WAN_RATE': at least 8kbit"
  WAN_DELAY_MS=$(ms_of --wan-delay "$WAN_DELAY")
  WAN_JITTER_MS=$(ms_of --wan-jitter "$WAN_JITTER")
  [[ $WAN_LOSS =~ ^[0-9]+(\.[0-9]+)?$ ]] && awk -v l="$WAN_LOSS" 'BEGIN { exit !(l < 100) }' ||
    die "--wan-loss '$WAN_LOSS': expected a percentage in [0, 100), e.g. 0.1"
  awk -v j="$WAN_JITTER_MS" -v d="$WAN_DELAY_MS" 'BEGIN { exit !(j <= d) }' ||
    die "--wan-jitter ${WAN_JITTER_MS} ms exceeds --wan-delay ${WAN_DELAY_MS} ms (a frame cannot leave before it arrived)"
}

# One wirefilter between switches A and B carrying DELAY ms (each way), LOSS percent and JITTER ms.
# The rate is not wirefilter's job where a kernel qdisc can do it: vde's userspace chain drops
# frames that arrive in line-rate bursts (a TCP window from a 1 Gbit/s node: one CUBIC stream made
# 30 Mbit/s through an unlimited wirefilter with 25 ms delay, 300 retransmissions in 8 s). So every
# site's uplink tap gets a tbf at the WAN rate (wan_up), which queues a burst in the kernel (one
# round trip of traffic, like a router buffer sized to the bandwidth-delay product) and hands VDE a
# paced stream. With more than two sites the core switch merges uplinks, so each wirefilter also
# limits the rate towards its site (-b, queue -c of one round trip).
wan_filter() {  # NAME SWITCH_A SWITCH_B DELAY_MS LOSS JITTER_MS
  local d; d=$(wan_dir)
  local delay=$4; [[ $6 == 0 ]] || delay="$4+$6"
  local rate=()
  if ((SITES > 2)); then rate=(-b "$((WAN_BPS / 8))" -c "$(wan_queue_bytes)"); fi
  in_wan wirefilter -v "$d/$2.ctl:$d/$3.ctl" -d "$delay" -l "$5" "${rate[@]}" \
    --daemon --pidfile "$d/$1.pid" >/dev/null
}

wan_queue_ms() { awk -v d="$WAN_DELAY_MS" 'BEGIN { q = 2 * d; if (q < 10) q = 10; printf "%.0f", q }'; }
wan_queue_bytes() { awk -v b="$WAN_BPS" -v ms="$(wan_queue_ms)" 'BEGIN { q = b / 8 * ms / 1000; if (q < 65536) q = 65536; printf "%.0f", q }'; }

wan_up() {
  local d; d=$(wan_dir)
  mkdir -p "$d"
  ip netns add "$(wan_ns)"
  ip netns exec "$(wan_ns)" sysctl -qw net.unix.max_dgram_qlen=$WAN_QLEN
  local s bns
  for ((s = 0; s < SITES; s++)); do
    bns=$(site_ns $s "$SITES")
    in_wan vde_switch -d -s "$d/sw$s.ctl" -p "$d/sw$s.pid" >/dev/null
    ip netns exec "$bns" sysctl -qw net.unix.max_dgram_qlen=$WAN_QLEN
    ip -n "$bns" tuntap add dev wan0 mode tap
    ip -n "$bns" link set wan0 master br0
    ip -n "$bns" link set wan0 up
    local burst=$((WAN_BPS / 8 / 250)); ((burst < 32768)) && burst=32768
    tc -n "$bns" qdisc replace dev wan0 root tbf rate "$WAN_BPS" burst "$burst" latency "$(wan_queue_ms)ms"
    ip netns exec "$bns" vde_plug2tap -d -s "$d/sw$s.ctl" -P "$d/plug$s.pid" wan0
  done
  if ((SITES == 2)); then
    wan_filter wf0 sw0 sw1 "$WAN_DELAY_MS" "$WAN_LOSS" "$WAN_JITTER_MS"
  else
    in_wan vde_switch -d -s "$d/core.ctl" -p "$d/core.pid" >/dev/null
    # Two uplinks in a row: half the delay each, and the loss q with 1 - (1 - q)^2 = WAN_LOSS.
    local half loss jit
    half=$(awk -v d="$WAN_DELAY_MS" 'BEGIN { printf "%g", d / 2 }')
    jit=$(awk -v j="$WAN_JITTER_MS" 'BEGIN { printf "%g", j / 2 }')
    loss=$(awk -v l="$WAN_LOSS" 'BEGIN { printf "%.6f", 100 * (1 - sqrt(1 - l / 100)) }')
    for ((s = 0; s < SITES; s++)); do wan_filter "wf$s" "sw$s" core "$half" "$loss" "$jit"; done
  fi
  # The daemons are up once their pid files are; wirefilter connects to its switches at start.
  local f
  for f in $(wan_pidfiles); do
    for _ in $(seq 50); do [[ -s $f ]] && break; sleep 0.05; done
    [[ -s $f ]] || { echo "tools/cluster: WAN daemon did not start ($f)" >&2; return 1; }
  done
}

wan_pidfiles() {  # every WAN daemon's pid file, whether it exists yet or not
  local d s; d=$(wan_dir)
  for ((s = 0; s < SITES; s++)); do echo "$d/sw$s.pid $d/plug$s.pid"; done
  if ((SITES == 2)); then echo "$d/wf0.pid"; else
    echo "$d/core.pid"
    for ((s = 0; s < SITES; s++)); do echo "$d/wf$s.pid"; done
  fi
}

wan_alive() {  # every WAN daemon of the recorded cluster runs
  ((SITES == 1)) && return 0
  local f
  for f in $(wan_pidfiles); do
    [[ -s $f ]] && kill -0 "$(cat "$f")" 2>/dev/null || return 1
  done
}

wan_down() {  # stops whatever WAN daemons the pid files name, removes their directory
  local d f pid; d=$(wan_dir)
  [[ -d $d ]] || return 0
  for f in "$d"/*.pid; do
    [[ -s $f ]] || continue
    pid=$(cat "$f")
    # Only our daemons: a stale pid file must not kill an unrelated process that reused the pid.
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) =~ ^(vde_switch|vde_plug2tap|wirefilter)$ ]] && kill "$pid" 2>/dev/null || true
  done
  rm -rf "$d"
}

wan_state() {  # state-file lines describing the WAN
  echo "wan_rate_bps=$WAN_BPS"
  local s
  for ((s = 0; s < SITES; s++)); do echo "site$s=$(site_ns $s "$SITES") wan0"; done
}

# CPU seconds (user + system) each WAN daemon has used so far: they share the cores with the workers.
wan_cpu_json() {
  local d f pid first=1 tick; d=$(wan_dir); tick=$(getconf CLK_TCK)
  printf '['
  for f in "$d"/*.pid; do
    [[ -s $f ]] || continue
    pid=$(cat "$f")
    [[ -r /proc/$pid/stat ]] || continue
    ((first)) || printf ', '
    first=0
    awk -v n="$(basename "$f" .pid)" -v p="$pid" -v t="$tick" \
      '{ sub(/^.*\) /, ""); printf "{\"daemon\": \"%s\", \"pid\": %d, \"cpu_s\": %.2f}", n, p, ($12 + $13) / t }' "/proc/$pid/stat"
  done
  printf ']'
}
