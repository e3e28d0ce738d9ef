#!/usr/bin/env bash
# A reference deployment on loopback, for trying it out: Redis (deploy/redis.conf), N replicas of
# `retnet serve --sessions redis://...` and HAProxy (deploy/haproxy.cfg) in front of them.
#
#   scripts/cluster.sh up [-n N] [-m MODEL_DIR] [--port P] [-- EXTRA SERVE FLAGS...]
#   scripts/cluster.sh status
#   scripts/cluster.sh down
#
# State (pid files, logs, Redis's data, the generated haproxy.cfg) lives in $RETNET_CLUSTER_DIR
# (default build/cluster). Replicas listen on P+1..P+N, Redis on P+100 (P: 8080 by default).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
STATE=${RETNET_CLUSTER_DIR:-build/cluster}
RETNET=${RETNET:-build/tools/retnet}

die() { echo "cluster.sh: $*" >&2; [ "${STARTING:-0}" = 1 ] && down >/dev/null; exit 1; }
usage() { sed -n '5,7p' "$0" | sed 's/^#  *//' >&2; exit 2; }

need() {  # need PROGRAM WHAT-TO-INSTALL
  command -v "$1" >/dev/null || die "$1 not found; install it (Debian: sudo apt-get install -y $2)"
}

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

wait_for_http() {  # wait_for_http URL SECONDS PID_FILE: until URL answers 200 or the process ends
  local deadline=$((SECONDS + $2))
  while [ $SECONDS -lt $deadline ]; do
    curl -sf -o /dev/null --max-time 2 "$1" && return 0
    alive "$3" || return 1
    sleep 0.2
  done
  return 1
}

up() {
  local n=3 model=models/shakespeare port=8080 extra=()
  while [ $# -gt 0 ]; do
    case $1 in
      -n) n=${2:?-n needs a number}; shift 2 ;;
      -m) model=${2:?-m needs a folder}; shift 2 ;;
      --port) port=${2:?--port needs a number}; shift 2 ;;
      --) shift; extra=("$@"); break ;;
      *) usage ;;
    esac
  done
  [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 64 ] || die "-n must be in [1, 64], got $n"
  [[ $port =~ ^[0-9]+$ ]] && [ "$port" -ge 1 ] && [ "$port" -le 65000 ] ||
    die "--port must be in [1, 65000], got $port"
  [ -x "$RETNET" ] || die "$RETNET not found; build it: cmake --build build --target retnet_cli retnet_serve"
  [ -d "$model" ] || die "model folder $model not found"
  need redis-server redis-server
  need redis-cli redis-tools
  need haproxy haproxy
  need curl curl
  [ -f "$STATE/haproxy.pid" ] && alive "$STATE/haproxy.pid" &&
    die "a cluster is already up ($STATE); run: scripts/cluster.sh down"
  mkdir -p "$STATE/redis"
  STATE=$(cd "$STATE" && pwd)
  # A failure on the way up stops what was started.
  STARTING=1

  local redis_port=$((port + 100))
  redis-server deploy/redis.conf --port "$redis_port" --dir "$STATE/redis" \
    >"$STATE/redis.log" 2>&1 &
  echo $! >"$STATE/redis.pid"
  local i
  for i in $(seq 50); do
    redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
    sleep 0.1
  done
  redis-cli -p "$redis_port" ping >/dev/null 2>&1 && alive "$STATE/redis.pid" ||
    die "redis-server did not start on port $redis_port (see $STATE/redis.log)"

  local servers="" r
  for r in $(seq "$n"); do
    "$RETNET" serve -m "$model" --host 127.0.0.1 --port $((port + r)) \
      --sessions "redis://127.0.0.1:$redis_port" "${extra[@]}" >"$STATE/replica$r.log" 2>&1 &
    echo $! >"$STATE/replica$r.pid"
    servers+="    server replica$r 127.0.0.1:$((port + r))\n"
  done
  for r in $(seq "$n"); do
    wait_for_http "http://127.0.0.1:$((port + r))/health" 60 "$STATE/replica$r.pid" ||
      die "replica $r did not answer /health (see $STATE/replica$r.log)"
  done

  sed -e "s/@PORT@/$port/" -e "s|@SERVERS@|${servers%\\n}|" deploy/haproxy.cfg >"$STATE/haproxy.cfg"
  haproxy -c -q -f "$STATE/haproxy.cfg" || die "haproxy refused $STATE/haproxy.cfg"
  haproxy -f "$STATE/haproxy.cfg" >"$STATE/haproxy.log" 2>&1 &
  echo $! >"$STATE/haproxy.pid"
  wait_for_http "http://127.0.0.1:$port/health" 30 "$STATE/haproxy.pid" ||
    die "HAProxy did not answer /health on port $port (see $STATE/haproxy.log)"
  STARTING=0
  echo "cluster up: http://127.0.0.1:$port ($n replicas, Redis on 127.0.0.1:$redis_port, state in $STATE)"
}

status() {
  local f any=0
  for f in "$STATE"/*.pid; do
    [ -e "$f" ] || continue
    any=1
    if alive "$f"; then echo "$(basename "$f" .pid): running (pid $(cat "$f"))"
    else echo "$(basename "$f" .pid): not running"; fi
  done
  [ $any -eq 1 ] || echo "no cluster in $STATE"
}

down() {
  local f pid
  # The proxy first (no new requests), then the replicas, Redis last (replicas commit to it).
  for f in "$STATE"/haproxy.pid "$STATE"/replica*.pid "$STATE"/redis.pid; do
    [ -e "$f" ] || continue
    pid=$(cat "$f")
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid"
      for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    fi
    rm -f "$f"
  done
  echo "cluster down ($STATE; Redis's data kept in $STATE/redis)"
}

case ${1:-} in
  up) shift; up "$@" ;;
  down) down ;;
  status) status ;;
  *) usage ;;
esac
