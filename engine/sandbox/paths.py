"""Which folders a sandbox can share with its guest.

A sandbox run's share and swap image lie beside ``--out`` (engine.runner.outdir), and
their host paths travel where not every character can: on user-mode Linux's kernel
command line (split at whitespace, ``"`` taken as quoting, ``ubd0=`` split at ``,`` and
``:``, the hostfs mount's options at ``,``; 4096 bytes in all, UML's
COMMAND_LINE_SIZE) and in qemu's option syntax (``-virtfs path=...``, ``-drive
file=...``: split at ``,``). Such a path is refused up front, naming the character.
"""

from __future__ import annotations

import os
from pathlib import Path

from engine.errors import EdgeprofError
from engine.files import lies_under

# what each sandbox cannot carry in a shared path, and why
UNSAFE = {
    "uml": {",": "the hostfs mount and ubd0= split at it", ":": "ubd0= splits at it",
            '"': "the kernel takes it as quoting"},
    "vm": {",": "qemu's -virtfs and -drive options split at it"},
}
UML_COMMAND_LINE = 4096  # UML's COMMAND_LINE_SIZE, its terminating NUL included
# what UML appends to the arguments it is given (" root=98:0 console=tty0" seen with 7.2)
UML_APPENDS = 64
# the longest name a run's share or swap image gets beside --out: a stamped_tempdir
# (pid up to 7 digits, mkdtemp's 8 random characters), the swap image's file name
_STAMP = ".9999999.xxxxxxxx"


# where both guests mount file systems of their own over the host's (engine/sandbox/
# init.sh, uml_init.sh): a host file under one is not there for the guest
GUEST_OWN = ("/proc", "/sys", "/dev", "/run")


def hidden_in_guest(path: str | os.PathLike) -> str | None:
    """The guest's own mount ``path`` lies under (its links resolved), or None."""
    real = os.path.realpath(path)
    return next((top for top in GUEST_OWN if lies_under(real, top)), None)


def check_inputs_visible(paths: dict[str, str | os.PathLike], sandbox: str) -> None:
    """Refuse (EdgeprofError) an input the guest of ``sandbox`` would not see: ``paths``
    maps what each is (said in the refusal) to its path."""
    for what, path in paths.items():
        top = hidden_in_guest(path)
        if top is not None:
            raise EdgeprofError(f"{what} {path}: the {sandbox} sandbox's guest mounts its own "
                                f"{top}, so it cannot read {os.path.realpath(path)}; move it "
                                f"out of {top}")


def share_path(out: str | os.PathLike) -> str:
    """``--out`` as its sandbox share's name is made from it: its parent's links resolved
    (UML's hostfs sees the host's real path)."""
    out = os.path.abspath(out)
    return os.path.join(os.path.realpath(os.path.dirname(out)), os.path.basename(out))


def unsafe_character(path: str, sandbox: str) -> tuple[str, str] | None:
    """The first character of ``path`` that ``sandbox`` cannot carry, and why; None if
    there is none."""
    for char in path:
        if sandbox == "uml" and char.isspace():
            name = "a space" if char == " " else f"whitespace ({char!r})"
            return name, "the kernel splits its command line at whitespace"
        if char in UNSAFE.get(sandbox, {}):
            return f"a {char!r}", UNSAFE[sandbox][char]
    return None


def uml_command_line(out: str) -> int:
    """The length in bytes of the UML command line of a run into ``out`` (a
    ``share_path``: its share and swap image beside it, their longest names), with what
    UML appends to it."""
    from engine.sandbox import uml

    folder, name = os.path.split(out)
    share = Path(folder, f".{name}.vm{_STAMP}")
    swap = Path(folder, f".edgeprof-swap{_STAMP}", "swap.img")
    argv = uml.boot_argv(Path("linux"), share, 99999, swap)
    return len(" ".join(argv[1:]).encode()) + UML_APPENDS


def check_share(out: str | os.PathLike, sandbox: str, what: str = "--out") -> None:
    """Refuse (EdgeprofError) an ``out`` whose sandbox share the ``sandbox`` ("uml",
    "vm"; any other: nothing to check) cannot carry to its guest."""
    if sandbox not in UNSAFE:
        return
    path = share_path(out)
    bad = unsafe_character(path, sandbox)
    if bad is not None:
        said, why = bad
        raise EdgeprofError(f"{what} {out}: the {sandbox} sandbox cannot share a folder "
                            f"whose path has {said} ({path}: {why}); choose {what} without "
                            f"it")
    if sandbox == "uml":
        length = uml_command_line(path)
        if length > UML_COMMAND_LINE:
            raise EdgeprofError(f"{what} {out}: its path is too long for the uml sandbox (its "
                                f"share and swap image go on the guest kernel's command line,"
                                f" {length} of at most {UML_COMMAND_LINE} bytes); choose a "
                                f"shorter {what}")
