# The vm backend's guest: a Debian backports kernel and a busybox initramfs, built once
# into VM_CACHE. The recipe hash (init script, builder, pinned kernel package) is a param,
# so editing the recipe rebuilds the guest and nothing else does.
import os

from engine.vm.guest import recipe_hash

VM_CACHE = f"{RESULTS}/vm-guest"
VM_GUEST = f"{VM_CACHE}/guest.json"


rule vm_guest:
    output:
        guest=VM_GUEST,
        kernel=f"{VM_CACHE}/vmlinuz",
        initrd=f"{VM_CACHE}/initrd.gz",
    params:
        py=PY,
        cache=lambda wc, output: os.path.dirname(output.guest),
        recipe=recipe_hash(),
    log:
        f"{RESULTS}/logs/vm_guest.log",
    conda:
        "../../envs/edgeprof.yaml"
    shell:
        "{params.py} -m engine.vm build --force --cache {params.cache} 2> {log}"
