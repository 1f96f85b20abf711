"""The sandboxes' old package name: ``python -m engine.vm build|check`` still works, with
a warning, for one release; the package is ``engine.sandbox`` (it holds both sandboxes,
where ``vm`` names the qemu guest alone)."""
