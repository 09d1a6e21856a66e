#!/usr/bin/env bash
# Shape a device's egress per destination on bare metal (a Pi's wlan0), as root, without net_cls:
# an htb root, one class per destination at its rate, a netem qdisc under it for delay/jitter/loss
# (only when asked and the kernel has sch_netem), and a u32 filter on the destination IP. Traffic
# to other addresses is not shaped. Same layout as the container helper (services/netem).
#
#   scripts/pi_shape.sh [-i IFACE] [-n NETNS] [--dry-run] apply IP=RATE[:DELAY[:JITTER[:LOSS]]] ...
#   scripts/pi_shape.sh [-i IFACE] [-n NETNS] clear | show
#
# RATE in MB/s (10^6 bytes/s on the wire), DELAY and JITTER in ms, LOSS in percent. Example, on
# worker 0 (next hop 192.168.1.22 at 3 MB/s, back to the master 192.168.1.20 at 3 MB/s, 20 ms):
#   sudo scripts/pi_shape.sh -i wlan0 apply 192.168.1.22=3 192.168.1.20=3:20
# `apply` replaces all earlier rules on IFACE. -n runs tc in a network namespace (for tests).
set -euo pipefail

IFACE=wlan0
NETNS=""
DRY=0

die() { echo "pi_shape: error: $*" >&2; exit 2; }
usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }

is_number() { [[ $1 =~ ^[0-9]+([.][0-9]+)?$ ]]; }

check_range() {
  # check_range NAME VALUE LOW HIGH: VALUE is a plain decimal number in [LOW, HIGH]
  is_number "$2" || die "$1 must be a number, got '$2'"
  awk -v v="$2" -v lo="$3" -v hi="$4" 'BEGIN { exit !(v >= lo && v <= hi) }' || die "$1 must be in [$3, $4], got $2"
}

check_ip() {
  local IFS=. octet
  [[ $1 =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "bad IPv4 address '$1'"
  for octet in $1; do ((10#$octet <= 255)) || die "bad IPv4 address '$1'"; done
}

run_tc() {
  # run (or print) one tc command, inside NETNS if given
  local cmd=(tc "$@")
  [ -n "$NETNS" ] && cmd=(ip netns exec "$NETNS" tc "$@")
  if [ "$DRY" = 1 ]; then echo "${cmd[*]}"; else "${cmd[@]}"; fi
}

have_netem() {
  [ "$DRY" = 1 ] && return 0
  unshare --net -- tc qdisc add dev lo root netem delay 1ms 2>/dev/null
}

clear_rules() { run_tc qdisc del dev "$IFACE" root 2>/dev/null || true; }

apply_one() {
  # apply_one INDEX IP RATE DELAY JITTER LOSS NETEM(0/1)
  local minor rate_bits burst quantum
  minor=$(printf '%x' $((0x10 + $1)))
  rate_bits=$(awk -v r="$3" 'BEGIN { printf "%d", r * 8000000 + 0.5 }')
  burst=$(awk -v r="$3" 'BEGIN { b = int(r * 1000); print (b < 3028 ? 3028 : b) }')
  quantum=$(awk -v r="$3" 'BEGIN { q = int(r * 100000); q = (q < 1600 ? 1600 : q); print (q > 60000 ? 60000 : q) }')
  run_tc class replace dev "$IFACE" parent 1: classid "1:$minor" htb rate "${rate_bits}bit" ceil "${rate_bits}bit" \
    burst "${burst}b" cburst "${burst}b" quantum "$quantum"
  if [ "$7" = 1 ]; then
    local jitter=()
    [ "$5" != 0 ] && jitter=("${5}ms")
    run_tc qdisc replace dev "$IFACE" parent "1:$minor" handle "$minor:" netem limit 10000 delay "${4}ms" "${jitter[@]}" \
      loss "${6}%"
  fi
  run_tc filter add dev "$IFACE" parent 1: protocol ip prio 1 handle "800::$minor" u32 match ip dst "$2/32" \
    flowid "1:$minor"
}

apply_all() {
  [ $# -gt 0 ] || die "apply needs at least one IP=RATE[:DELAY[:JITTER[:LOSS]]]"
  local specs=() spec ip rest rate delay jitter loss impaired=0 netem=0 i=0
  for spec in "$@"; do
    ip=${spec%%=*}; rest=${spec#*=}
    [ "$ip" != "$spec" ] || die "'$spec' must be IP=RATE[:DELAY[:JITTER[:LOSS]]]"
    IFS=: read -r rate delay jitter loss extra <<<"$rest"
    [ -z "${extra:-}" ] || die "'$spec' has too many fields"
    delay=${delay:-0}; jitter=${jitter:-0}; loss=${loss:-0}
    check_ip "$ip"
    check_range rate "$rate" 0.001 10000
    check_range delay "$delay" 0 60000
    check_range jitter "$jitter" 0 60000
    check_range loss "$loss" 0 100
    awk -v d="$delay" -v j="$jitter" -v l="$loss" 'BEGIN { exit !(d + j + l > 0) }' && impaired=1
    specs+=("$ip $rate $delay $jitter $loss")
  done
  if [ "$impaired" = 1 ]; then
    if have_netem; then netem=1; else echo "pi_shape: warning: no sch_netem in this kernel; rates only" >&2; fi
  fi
  clear_rules
  run_tc qdisc add dev "$IFACE" root handle 1: htb
  for spec in "${specs[@]}"; do
    # shellcheck disable=SC2086  # spec is five validated words
    apply_one "$i" $spec "$netem"
    i=$((i + 1))
  done
}

main() {
  [ $# -gt 0 ] || usage 2
  while [ $# -gt 0 ]; do
    case $1 in
      -i) IFACE=${2:?}; shift 2 ;;
      -n) NETNS=${2:?}; shift 2 ;;
      --dry-run) DRY=1; shift ;;
      -h|--help) usage 0 ;;
      *) break ;;
    esac
  done
  [[ $IFACE =~ ^[A-Za-z0-9_.-]{1,15}$ ]] || die "bad interface name '$IFACE'"
  local cmd=${1:-}
  shift || true
  case $cmd in
    apply) apply_all "$@" ;;
    clear) clear_rules ;;
    show) run_tc -s qdisc show dev "$IFACE"; run_tc class show dev "$IFACE"; run_tc filter show dev "$IFACE" ;;
    *) usage 2 ;;
  esac
}

main "$@"
