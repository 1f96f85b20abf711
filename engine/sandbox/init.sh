#!/bin/busybox sh
# edgeprof guest /init (PID 1 in the initramfs; stays there so it can always power off).
# Kernel cmdline: vm.swap=disk|none  vm.cmd=<script in the vmout share>
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc; mount -t sysfs sysfs /sys; mount -t devtmpfs devtmpfs /dev
log() { echo "EDGEPROF_VM[$(cut -d' ' -f1 /proc/uptime)] $*"; }
die() { log "FATAL $*"; poweroff -f; }
SWAP=disk; CMD=job.sh; MSIZE=262144  # 9p message size: fewer round trips for big reads
for a in $(cat /proc/cmdline); do
  case "$a" in vm.swap=*) SWAP=${a#vm.swap=} ;; vm.cmd=*) CMD=${a#vm.cmd=} ;; esac
done
for m in $(cat /lib/modules/order); do insmod /lib/modules/$m.ko || log "insmod $m FAILED"; done
# the host's / read-only (cache=loose: fast, never written), a tmpfs overlay on top
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=$MSIZE,cache=loose hostroot /lower \
  || die "9p root mount failed"
mount -t tmpfs -o size=256m,mode=755 tmpfs /upper; mkdir -p /upper/u /upper/w
mount -t overlay -o lowerdir=/lower,upperdir=/upper/u,workdir=/upper/w overlay /newroot \
  || { log "overlay failed, read-only root"; mount --bind /lower /newroot; }
R=/newroot
mount -t proc proc $R/proc; mount -t sysfs sysfs $R/sys; mount -t devtmpfs devtmpfs $R/dev
mkdir -p $R/dev/pts $R/dev/shm
mount -t devpts devpts $R/dev/pts; mount -t tmpfs -o mode=1777 tmpfs $R/dev/shm
# /tmp stays the host's (through the overlay): inputs such as pytest's tmp_path live there
mount -t tmpfs -o mode=755 tmpfs $R/run
mkdir -p $R/run/scratch; mount -t tmpfs -o mode=1777,size=512m tmpfs $R/run/scratch
mount -t cgroup2 -o nsdelegate cgroup2 $R/sys/fs/cgroup || die "cgroup2 mount failed"
mkdir -p $R/run/vmout
mount -t 9p -o trans=virtio,version=9p2000.L,rw,msize=$MSIZE vmout $R/run/vmout \
  || die "vmout share mount failed"
if [ "$SWAP" = disk ]; then
  [ -b /dev/vda ] || die "no /dev/vda for swap"
  mkswap /dev/vda >/dev/null && swapon /dev/vda || die "swapon /dev/vda failed"
fi
# the job's delegated parent cgroup: empty, memory enabled for its children; the job
# learns it from EDGEPROF_CGROUP_ROOT (engine/limits' designated root)
CG_ROOT=/sys/fs/cgroup/edgeprof
echo +memory > $R/sys/fs/cgroup/cgroup.subtree_control || die "cannot enable memory controller"
mkdir $R$CG_ROOT || die "cannot create $CG_ROOT"
log "swap: $(tail -n +2 /proc/swaps | tr -s ' ' | tr '\n' ';')"
log "VM_CMD_START"
chroot $R /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 EDGEPROF_CGROUP_ROOT=$CG_ROOT \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  /bin/sh -c "cd /run/vmout && exec /bin/sh /run/vmout/$CMD" < /dev/console
rc=$?
log "VM_CMD_END rc=$rc"
echo $rc > $R/run/vmout/rc.tmp && mv $R/run/vmout/rc.tmp $R/run/vmout/rc
sync; umount $R/run/vmout 2>/dev/null; swapoff -a 2>/dev/null
poweroff -f
