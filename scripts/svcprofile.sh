#!/bin/bash
# svcprofile.sh: the service path's cost per decision, with profiles.
#
# Usage: scripts/svcprofile.sh FLOODGATE [OUTDIR [SECONDS [LOADTEST]]]
#
# For each store (memory, a private redis-server) and API (gRPC
# ShouldRateLimit, HTTP POST /v1/check), it starts FLOODGATE serve with one
# limit that never denies (sliding window, 1e9 per minute, descriptor or
# dimension "user") and --pprof on a loopback admin listener, drives it
# with LOADTEST (default FLOODGATE) loadtest at 64 callers over 10,000
# identities for 2 s of warm-up then SECONDS (default 10), and prints one
# line: decisions/s, the serve process's user+sys CPU per decision
# (/proc/PID/stat over the measured window; for the redis store, its
# redis-server's too), its heap allocations per
# request (go_memstats_mallocs_total over the window), p50/p99, the
# decisions the fallback took (rate_limit_fallback_total: non-zero means
# Redis missed the budget, as on an overloaded machine) and, for the redis
# store, the script calls per decision (EVAL* and EVALSHA* of INFO
# commandstats over the window: fewer means larger coalesced calls). OUTDIR (default
# ./svcprofile) gets each cell's CPU profile (SECONDS-2 s) and allocation
# profiles at the start and end of the window: compare them with
#   go tool pprof -top FLOODGATE OUTDIR/mem-grpc.cpu
#   go tool pprof -sample_index=alloc_objects -top -diff_base OUTDIR/mem-grpc.allocs0 FLOODGATE OUTDIR/mem-grpc.allocs1
# STORES (default "mem redis") and APIS (default "grpc http") pick the
# cells, CALLERS (default 64) the load generator's concurrency.
# LOADTEST_ARGS adds flags to the load generator (e.g. "--connections 8",
# with APIS=grpc: loadtest refuses a flag its target does not use).
# SERVE_ARGS adds flags to serve in every cell; SERVE_REDIS_ARGS in the
# redis cells only, e.g. SERVE_REDIS_ARGS="--fallback-budget 1s" so that a
# Redis slowed by a busy machine does not hand decisions to the local
# fallback (which would make the cell measure that instead): serve refuses
# the flags of Redis (--fallback-budget among them) in memory.
# Every process it starts is stopped by its pid. Needs redis-server, curl,
# awk and python3.
set -euo pipefail
BIN=$(realpath "${1:?usage: $0 FLOODGATE [OUTDIR [SECONDS [LOADTEST]]]}")
OUT=${2:-svcprofile}
DUR=${3:-10}
LT=$(realpath "${4:-$BIN}")
mkdir -p "$OUT"
OUT=$(realpath "$OUT")
WORK=$(mktemp -d)
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$WORK"
}
trap cleanup EXIT

freeport() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

cat >"$WORK/floodgate.yaml" <<'YAML'
version: "1"
policies:
  - name: api
    layers:
      - {name: per-user, algorithm: sliding_window, limit: 1_000_000_000, window: 1m, dimension: user}
YAML
cat >"$WORK/envoy.yaml" <<'YAML'
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1000000000, algorithm: sliding_window}
YAML

RP=$(freeport)
redis-server --port "$RP" --bind 127.0.0.1 --save '' --appendonly no --logfile "$WORK/redis.log" &
RPID=$!
PIDS+=($RPID)
for _ in $(seq 50); do redis-cli -p "$RP" ping >/dev/null 2>&1 && break; sleep 0.1; done

TOKEN=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
TICK=$(getconf CLK_TCK)
echo "$(date -u +%FT%TZ) $(uptime)"
echo "floodgate: $BIN; load generator: $LT; ${DUR}s per cell, ${CALLERS:-64} callers, 10000 identities; serve flags added: ${SERVE_ARGS:-none}, on Redis: ${SERVE_REDIS_ARGS:-none}"
for store in ${STORES:-mem redis}; do
	for api in ${APIS:-grpc http}; do
		HP=$(freeport); GP=$(freeport); AP=$(freeport)
		args=(serve --addr "127.0.0.1:$HP" --grpc-addr "127.0.0.1:$GP" --admin-addr "127.0.0.1:$AP" --admin-token "$TOKEN" --pprof
			--config "$WORK/floodgate.yaml" --envoy-config "$WORK/envoy.yaml" --log-level warn)
		# shellcheck disable=SC2206 # SERVE_REDIS_ARGS is split on purpose
		[ "$store" = redis ] && args+=(--redis "redis://127.0.0.1:$RP/0" --prefix "svcp$RANDOM" ${SERVE_REDIS_ARGS:-})
		# shellcheck disable=SC2206 # SERVE_ARGS is split on purpose
		args+=(${SERVE_ARGS:-})
		"$BIN" "${args[@]}" 2>"$WORK/serve.log" &
		SP=$!
		PIDS+=($SP)
		for _ in $(seq 100); do curl -sf "127.0.0.1:$HP/healthz" >/dev/null && break; sleep 0.1; done
		target=grpc://127.0.0.1:$GP
		[ "$api" = http ] && target=http://127.0.0.1:$HP
		# shellcheck disable=SC2086 # LOADTEST_ARGS is split on purpose
		"$LT" loadtest --target "$target" --concurrency "${CALLERS:-64}" --duration 2s --identities 10000 --quiet ${LOADTEST_ARGS:-} >/dev/null
		metric() { curl -s "127.0.0.1:$AP/metrics" | awk -v m="$1" '$1 ~ "^"m {s+=$2} END {printf "%d", s}'; }
		m0=$(metric go_memstats_mallocs_total)
		calls() { redis-cli -p "$RP" info commandstats | awk -F'[=,:]' '/^cmdstat_eval/ {s+=$3} END {printf "%d", s}'; }
		e0=$(calls)
		c0=$(awk '{print $14+$15}' "/proc/$SP/stat")
		r0=$(awk '{print $14+$15}' "/proc/$RPID/stat")
		curl -s -o "$OUT/$store-$api.cpu" "127.0.0.1:$AP/debug/pprof/profile?seconds=$((DUR - 2))" &
		CP=$!
		curl -s -o "$OUT/$store-$api.allocs0" "127.0.0.1:$AP/debug/pprof/allocs"
		# shellcheck disable=SC2086 # LOADTEST_ARGS is split on purpose
		rep=$("$LT" loadtest --target "$target" --concurrency "${CALLERS:-64}" --duration "${DUR}s" --identities 10000 --quiet ${LOADTEST_ARGS:-})
		c1=$(awk '{print $14+$15}' "/proc/$SP/stat")
		r1=$(awk '{print $14+$15}' "/proc/$RPID/stat")
		m1=$(metric go_memstats_mallocs_total)
		e1=$(calls)
		wait "$CP"
		curl -s -o "$OUT/$store-$api.allocs1" "127.0.0.1:$AP/debug/pprof/allocs"
		fb=$(metric rate_limit_fallback_total)
		kill "$SP"; wait "$SP" 2>/dev/null || true
		n=$(awk '$1 == "requests" {print $2}' <<<"$rep")
		rate=$(grep -oP '\(\K[0-9.]+(?= req/s)' <<<"$rep")
		lat=$(awk '$1 == "latency" {print $3, $5}' <<<"$rep")
		python3 - "$store" "$api" "$n" "$rate" "$c0" "$c1" "$TICK" "$m0" "$m1" "$fb" "$lat" "$r0" "$r1" "$e0" "$e1" <<'PY'
import sys
store, api, n, rate, c0, c1, tick, m0, m1, fb, lat, r0, r1, e0, e1 = sys.argv[1:]
n = max(int(n or 0), 1)
cpu = (int(c1) - int(c0)) / int(tick)
rcpu = (int(r1) - int(r0)) / int(tick)
redis = f" + Redis {rcpu*1e6/n:4.1f}" if store == "redis" else ""
calls = f"  script calls {(int(e1)-int(e0))/n:.3f}/decision" if store == "redis" else ""
print(f"{store:5} {api:4}: {float(rate):8.0f} decisions/s  serve CPU {cpu*1e6/n:5.1f}{redis} µs/decision  "
      f"{(int(m1)-int(m0))/n:4.0f} allocs/request  p50/p99 {lat}  fallback decisions {fb}{calls}")
PY
	done
done
echo "$(date -u +%FT%TZ) $(uptime)"
