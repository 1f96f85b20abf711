#!/bin/sh
# edgeprof user-mode Linux /init (PID 1). The root is the host's / over hostfs, read-only,
# so the host's Python and project run unchanged; the run share comes in read-write over
# hostfs at /run/vmout. Kernel cmdline: vm.share=<host path> vm.swap=disk|none
# vm.cmd=<script in the share>. Ends with a power-off (the UML process exits).
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
BB=/bin/busybox
[ -x $BB ] || BB=/usr/bin/busybox
mount -t proc proc /proc
log() { echo "EDGEPROF_VM[$(cut -d' ' -f1 /proc/uptime)] $*"; }
off() { sync; $BB poweroff -f; }
die() { log "FATAL $*"; off; }
SWAP=disk; CMD=job.sh; SHARE=
for a in $(cat /proc/cmdline); do
  case "$a" in vm.swap=*) SWAP=${a#vm.swap=} ;; vm.cmd=*) CMD=${a#vm.cmd=} ;;
               vm.share=*) SHARE=${a#vm.share=} ;; esac
done
mount -t sysfs sysfs /sys; mount -t devtmpfs devtmpfs /dev 2>/dev/null
mount -t tmpfs -o mode=755 tmpfs /run || die "tmpfs /run failed"
mkdir -p /dev/pts /dev/shm; mount -t devpts devpts /dev/pts; mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mkdir -p /run/scratch /run/vmout
mount -t tmpfs -o mode=1777,size=512m tmpfs /run/scratch
[ -n "$SHARE" ] || die "no vm.share on the command line"
mount -t hostfs -o "$SHARE" none /run/vmout || die "hostfs share mount failed"
mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup || die "cgroup2 mount failed"
if [ "$SWAP" = disk ]; then
  [ -b /dev/ubda ] || die "no /dev/ubda for swap"
  mkswap /dev/ubda >/dev/null && swapon /dev/ubda || die "swapon /dev/ubda failed"
fi
CG_ROOT=/sys/fs/cgroup/edgeprof
echo +memory > /sys/fs/cgroup/cgroup.subtree_control || die "cannot enable memory controller"
mkdir $CG_ROOT || die "cannot create $CG_ROOT"
log "swap: $(tail -n +2 /proc/swaps | tr -s ' ' | tr '\n' ';')"
log "VM_CMD_START"
/usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 EDGEPROF_CGROUP_ROOT=$CG_ROOT \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  /bin/sh -c "cd /run/vmout && exec /bin/sh /run/vmout/$CMD" < /dev/console
rc=$?
log "VM_CMD_END rc=$rc"
echo $rc > /run/vmout/rc.tmp && mv /run/vmout/rc.tmp /run/vmout/rc
swapoff -a 2>/dev/null
off
