#!/usr/bin/env bash
# A single-node CephFS on this machine, for running kaas brokers on a real
# distributed file system with one client (one ceph-fuse mount) per broker.
#
#   scripts/cephfs.sh start  DIR N   start the cluster (if not running) and mount
#                                    the file system N times at DIR/mnt0..DIR/mnt{N-1}
#   scripts/cephfs.sh stop   DIR     unmount every DIR/mnt*, stop every daemon started here
#   scripts/cephfs.sh status DIR     daemons, mounts, `ceph -s`
#   scripts/cephfs.sh mount  DIR N   (re)mount only: DIR/mnt0..N-1, cluster must be up
#   scripts/cephfs.sh umount DIR     unmount only
#
# What it runs (Debian 12's ceph 16.2 "pacific" packages, installed when missing):
# one mon, one mgr, one OSD, one MDS, all on 127.0.0.1 only, no authentication
# (auth_*_required = none), pools of replication size 1, small caches, sized for
# 2 cores. The OSD uses memstore (objects in the OSD's memory, saved to
# DIR/osd/ceph-0 at a clean stop and loaded at start): Debian's ceph-osd is built
# with it, so no block device or file-backed bluestore is needed.
# Everything (config, daemon data, logs, pid files, admin sockets, mount points)
# lives under DIR; nothing is written to /etc/ceph or /var/lib/ceph.
#
# Every wait is bounded; a step that does not finish in time fails with a message
# naming the daemon's log. Running `start` again is harmless: what runs is kept.
#
# Environment:
#   CEPHFS_FUSE_ARGS   extra ceph-fuse options for every mount, for example
#                      "--fuse_disable_pagecache=true --client_oc=false"
#   CEPHFS_WAIT        seconds to wait for each step (default 90)
# and, read only by the first `start` (they go into DIR/ceph.conf):
#   CEPHFS_MON_PORT    the mon's msgr2 port (default 3300; msgr1 is CEPHFS_MON_PORT+3489)
#   CEPHFS_MEM_BYTES   memstore capacity in bytes (default 2 GiB; it is RAM)
#   CEPHFS_MDS_TICK    mds_tick_interval in seconds (default 1; Ceph's own default is 5)
set -euo pipefail

usage() {
  echo "usage: $0 start DIR N | stop DIR | status DIR | mount DIR N | umount DIR" >&2
  exit 2
}
[ $# -ge 2 ] || usage
cmd=$1
case "$cmd" in
start | mount) mkdir -p "$2" ;;
*) [ -d "$2" ] || { echo "cephfs: $2 does not exist: nothing to $cmd" >&2; exit 1; } ;;
esac
DIR=$(cd "$2" && pwd)
N=${3:-}
CONF="$DIR/ceph.conf"
WAIT=${CEPHFS_WAIT:-90}
MON_PORT=${CEPHFS_MON_PORT:-3300}
MON_PORT1=$((MON_PORT + 3489)) # 3300 -> 6789, Ceph's usual pair
MEM_BYTES=${CEPHFS_MEM_BYTES:-2147483648}
MDS_TICK=${CEPHFS_MDS_TICK:-1}

log() { printf '== cephfs: %s\n' "$*"; }
die() {
  printf 'cephfs: ERROR: %s\n' "$*" >&2
  exit 1
}

# ceph CLI against this cluster only, never hanging: --connect-timeout bounds the
# mon handshake and timeout(1) the whole command.
c() { timeout 30 ceph -c "$CONF" --connect-timeout 20 "$@"; }

# pid_alive NAME: the daemon NAME (mon.a, osd.0, ...) has a pid file here and
# that process is alive.
pid_alive() {
  local f="$DIR/run/$1.pid"
  [ -s "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null
}

# wait_for WHAT CHECK...: run CHECK once a second until it succeeds, at most $WAIT s.
wait_for() {
  local what=$1
  shift
  local i
  for ((i = 0; i < WAIT; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 1
  done
  die "$what did not come up within ${WAIT}s (logs: $DIR/log/)"
}

install_packages() {
  local need=()
  command -v ceph-mon >/dev/null 2>&1 || need+=(ceph-mon)
  command -v ceph-mgr >/dev/null 2>&1 || need+=(ceph-mgr)
  command -v ceph-osd >/dev/null 2>&1 || need+=(ceph-osd)
  command -v ceph-mds >/dev/null 2>&1 || need+=(ceph-mds)
  command -v ceph-fuse >/dev/null 2>&1 || need+=(ceph-fuse)
  if [ ${#need[@]} -gt 0 ]; then
    [ "$(id -u)" = 0 ] || die "needs root to install ${need[*]} (or install them first)"
    log "installing ${need[*]}"
    apt-get update -qq || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null \
      || die "apt-get install ${need[*]} failed"
  fi
  [ -e /dev/fuse ] || die "/dev/fuse is missing: ceph-fuse cannot mount"
}

# The config: written once (it holds the fsid), then kept.
write_conf() {
  [ -s "$CONF" ] && return 0
  mkdir -p "$DIR"/{run,log,mon,mgr,osd,mds}
  local fsid
  fsid=$(cat /proc/sys/kernel/random/uuid)
  cat >"$CONF" <<EOF
# Written by scripts/cephfs.sh: a single-node CephFS under $DIR.
[global]
fsid = $fsid
mon_host = [v2:127.0.0.1:$MON_PORT,v1:127.0.0.1:$MON_PORT1]
mon_initial_members = a
# loopback only
public_addr = 127.0.0.1
cluster_addr = 127.0.0.1
ms_bind_ipv4 = true
ms_bind_ipv6 = false
# no authentication: the keyring below is made at mkfs but no key is ever checked
auth_cluster_required = none
auth_service_required = none
auth_client_required = none
keyring = $DIR/keyring
# everything under DIR
run_dir = $DIR/run
pid_file = $DIR/run/\$name.pid
admin_socket = $DIR/run/\$name.asok
log_file = $DIR/log/\$name.log
mon_data = $DIR/mon/\$cluster-\$id
mgr_data = $DIR/mgr/\$cluster-\$id
osd_data = $DIR/osd/\$cluster-\$id
mds_data = $DIR/mds/\$cluster-\$id
log_to_stderr = false
err_to_stderr = true
# one OSD: replication size 1, few placement groups, no autoscaler
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
osd_pool_default_pg_autoscale_mode = off
mon_allow_pool_size_one = true
mon_warn_on_pool_no_redundancy = false
osd_crush_chooseleaf_type = 0
# small for 2 cores
osd_objectstore = memstore
# a SIGTERM'd OSD must unmount its store: that is when memstore saves to disk
osd_fast_shutdown = false
memstore_device_bytes = $MEM_BYTES
osd_op_num_shards = 1
osd_op_num_threads_per_shard = 2
mds_cache_memory_limit = 268435456
mon_memory_target = 268435456
client_oc_size = 67108864
mon_data_avail_warn = 2
mon_data_avail_crit = 1
# The MDS flushes its journal at least every tick. An operation that must wait
# for another client's journaled change (a lookup of a name just renamed or
# linked there, a rename or folder fsync racing a reader) can wait for that
# flush: up to mds_tick_interval (Ceph's default 5 s; measured in docs/volume.md).
# 1 s bounds those waits at about 1 s.
mds_tick_interval = $MDS_TICK
# no keys are used at all, so the reclaim warning says nothing here
mon_warn_on_insecure_global_id_reclaim = false
mon_warn_on_insecure_global_id_reclaim_allowed = false
EOF
}

start_mon() {
  if [ ! -e "$DIR/mon/ceph-a/store.db" ]; then
    log "mon: mkfs"
    ceph-authtool --create-keyring "$DIR/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
    ceph-authtool "$DIR/keyring" --gen-key -n client.admin \
      --cap mon 'allow *' --cap osd 'allow *' --cap mds 'allow *' --cap mgr 'allow *' >/dev/null
    local fsid
    fsid=$(sed -n 's/^fsid = //p' "$CONF")
    monmaptool --create --clobber --fsid "$fsid" \
      --addv a "[v2:127.0.0.1:$MON_PORT,v1:127.0.0.1:$MON_PORT1]" "$DIR/monmap" >/dev/null
    mkdir -p "$DIR/mon/ceph-a"
    ceph-mon -c "$CONF" --mkfs -i a --monmap "$DIR/monmap" --keyring "$DIR/keyring" \
      || die "ceph-mon --mkfs failed (log: $DIR/log/mon.a.log)"
  fi
  if ! pid_alive mon.a; then
    # another cluster (or anything) on the mon's port: say so rather than wait
    if (exec 3<>"/dev/tcp/127.0.0.1/$MON_PORT") 2>/dev/null; then
      die "127.0.0.1:$MON_PORT is already in use (another cluster? set CEPHFS_MON_PORT)"
    fi
    log "mon.a: start"
    ceph-mon -c "$CONF" -i a || die "ceph-mon did not start (log: $DIR/log/mon.a.log)"
  fi
  wait_for "mon.a (quorum)" c quorum_status
}

start_mgr() {
  mkdir -p "$DIR/mgr/ceph-x"
  if ! pid_alive mgr.x; then
    log "mgr.x: start"
    ceph-mgr -c "$CONF" -i x || die "ceph-mgr did not start (log: $DIR/log/mgr.x.log)"
  fi
  # the mgr is up when the mon's mgr map names an active one
  wait_for "mgr.x" bash -c "timeout 30 ceph -c '$CONF' --connect-timeout 20 mgr stat | grep -q '\"available\": true'"
}

start_osd() {
  if [ ! -s "$DIR/osd/ceph-0/whoami" ]; then
    log "osd.0: mkfs (memstore)"
    local uuid id
    uuid=$(cat /proc/sys/kernel/random/uuid)
    id=$(c osd new "$uuid") || die "ceph osd new failed"
    [ "$id" = 0 ] || die "expected osd id 0, got '$id' (a half-made cluster? stop, remove $DIR, start again)"
    mkdir -p "$DIR/osd/ceph-0"
    ceph-osd -c "$CONF" -i 0 --mkfs --osd-uuid "$uuid" >/dev/null 2>&1 \
      || die "ceph-osd --mkfs failed (log: $DIR/log/osd.0.log)"
  fi
  if ! pid_alive osd.0; then
    log "osd.0: start"
    ceph-osd -c "$CONF" -i 0 2>/dev/null || die "ceph-osd did not start (log: $DIR/log/osd.0.log)"
  fi
  wait_for "osd.0 (up)" bash -c "timeout 30 ceph -c '$CONF' --connect-timeout 20 osd stat | grep -q '1 up'"
}

start_fs() {
  if ! c fs ls 2>/dev/null | grep -q 'name: cephfs'; then
    log "file system: pools and fs"
    c osd pool create cephfs_metadata 8 8 >/dev/null 2>&1 || die "pool create failed"
    c osd pool create cephfs_data 8 8 >/dev/null 2>&1 || die "pool create failed"
    c osd pool set cephfs_metadata size 1 --yes-i-really-mean-it >/dev/null 2>&1 || die "pool size 1 refused"
    c osd pool set cephfs_data size 1 --yes-i-really-mean-it >/dev/null 2>&1 || die "pool size 1 refused"
    c fs new cephfs cephfs_metadata cephfs_data >/dev/null 2>&1 || die "ceph fs new failed"
  fi
  mkdir -p "$DIR/mds/ceph-a"
  if ! pid_alive mds.a; then
    log "mds.a: start"
    ceph-mds -c "$CONF" -i a >/dev/null 2>&1 || die "ceph-mds did not start (log: $DIR/log/mds.a.log)"
  fi
  wait_for "mds.a (up:active)" bash -c "timeout 30 ceph -c '$CONF' --connect-timeout 20 mds stat | grep -q 'up:active'"
  # every placement group active+clean ("17 pgs: 17 active+clean; ...")
  wait_for "placement groups (active+clean)" bash -c \
    "timeout 30 ceph -c '$CONF' --connect-timeout 20 pg stat | grep -Eq '^([0-9]+) pgs: \\1 active\\+clean;'"
}

# do_mount N: DIR/mnt0..N-1, each its own ceph-fuse process (its own client,
# client.mntK, with its own log and admin socket).
do_mount() {
  local n=$1 k m
  if ! [[ "$n" =~ ^[0-9]+$ ]] || [ "$n" -lt 1 ] || [ "$n" -gt 16 ]; then
    die "N must be 1..16, got '$n'"
  fi
  for ((k = 0; k < n; k++)); do
    m="$DIR/mnt$k"
    mkdir -p "$m"
    if mountpoint -q "$m"; then continue; fi
    log "mount client.mnt$k at $m ${CEPHFS_FUSE_ARGS:-}"
    # shellcheck disable=SC2086 # CEPHFS_FUSE_ARGS is a list of options
    timeout "$WAIT" ceph-fuse -c "$CONF" -n "client.mnt$k" ${CEPHFS_FUSE_ARGS:-} "$m" >/dev/null 2>"$DIR/log/ceph-fuse.mnt$k.err" \
      || die "ceph-fuse for $m failed: $(tail -3 "$DIR/log/ceph-fuse.mnt$k.err") (log: $DIR/log/client.mnt$k.log)"
    wait_for "mount $m" mountpoint -q "$m"
  done
}

do_umount() {
  local m k pid i
  for m in "$DIR"/mnt*; do
    [ -d "$m" ] || continue
    k=${m##*/mnt}
    if mountpoint -q "$m"; then
      log "unmount $m"
      fusermount -u "$m" 2>/dev/null || umount "$m" || die "cannot unmount $m (busy? see: fuser -vm $m)"
    fi
    # the ceph-fuse process exits once unmounted; wait for it (bounded)
    pid=$(cat "$DIR/run/client.mnt$k.pid" 2>/dev/null || true)
    if [ -n "$pid" ]; then
      for ((i = 0; i < 30 && $(kill -0 "$pid" 2>/dev/null && echo 1 || echo 0); i++)); do sleep 1; done
      if kill -0 "$pid" 2>/dev/null; then
        log "ceph-fuse $pid for $m did not exit in 30s: SIGKILL"
        kill -9 "$pid" 2>/dev/null || true
      fi
      rm -f "$DIR/run/client.mnt$k.pid"
    fi
  done
}

# stop_daemon NAME: SIGTERM by pid file (a clean shutdown; memstore saves then),
# at most 60 s, then SIGKILL with a message.
stop_daemon() {
  local name=$1 f="$DIR/run/$1.pid" pid i
  [ -s "$f" ] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    log "stop $name (pid $pid)"
    kill -TERM "$pid"
    for ((i = 0; i < 60; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 1
    done
    if kill -0 "$pid" 2>/dev/null; then
      log "$name did not stop within 60s: SIGKILL"
      kill -9 "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$f"
}

status() {
  local name m
  for name in mon.a mgr.x osd.0 mds.a; do
    if pid_alive "$name"; then echo "$name: running (pid $(cat "$DIR/run/$name.pid"))"; else echo "$name: not running"; fi
  done
  for m in "$DIR"/mnt*; do
    [ -d "$m" ] || continue
    if mountpoint -q "$m"; then echo "$m: mounted"; else echo "$m: not mounted"; fi
  done
  if pid_alive mon.a; then c -s || true; fi
}

case "$cmd" in
start)
  [ -n "$N" ] || usage
  install_packages
  write_conf
  start_mon
  start_mgr
  start_osd
  start_fs
  do_mount "$N"
  log "up: mon.a mgr.x osd.0 mds.a; mounts $DIR/mnt0..$DIR/mnt$((N - 1))"
  ;;
mount)
  [ -n "$N" ] || usage
  pid_alive mds.a || die "the cluster is not running: $0 start $DIR $N"
  do_mount "$N"
  ;;
umount) do_umount ;;
stop)
  do_umount
  for name in mds.a osd.0 mgr.x mon.a; do stop_daemon "$name"; done
  log "stopped (state kept in $DIR; remove it to start from scratch)"
  ;;
status) status ;;
*) usage ;;
esac
