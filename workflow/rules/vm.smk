# The vm backend's guest: a Debian backports kernel and a busybox initramfs, built once
# into VM_CACHE, only when some run goes to the VM (sandbox.enabled, or run.backend vm). The
# recipe hash (init script, builder, pinned kernel package) is a param, so editing the
# recipe rebuilds the guest and nothing else does.


rule vm_guest:
    output:
        guest=VM_GUEST,
        kernel=f"{VM_CACHE}/vmlinuz",
        initrd=f"{VM_CACHE}/initrd.gz",
    log:
        f"{RESULTS}/logs/vm_guest.log",
    benchmark:
        f"{RESULTS}/benchmarks/vm_guest.tsv"
    conda:
        "../../envs/run.yaml"
    params:
        cache=output_dir,
        recipe=vm_recipe,
    shell:
        "python -m engine.sandbox build --sandbox vm --force --cache {params.cache:q} 2> {log:q}"
