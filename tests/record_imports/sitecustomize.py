"""Imported at the start of every Python process that has this folder on PYTHONPATH: with
EDGEPROF_TEST_IMPORTS set to a folder, the process writes there, in a file of its own, its
command line and then each engine module as it is first imported, and numpy, one line
each (flushed per line: a process may end by os._exit)."""

import os
import sys

_FOLDER = os.environ.get("EDGEPROF_TEST_IMPORTS")


class _Recorder:
    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.file = None

    def find_spec(self, name, path=None, target=None):
        if name in ("engine", "numpy") or name.startswith("engine."):
            if self.file is None:
                self.file = open(os.path.join(self.folder, f"{os.getpid()}.txt"), "a",
                                 buffering=1)
                self.file.write("\0".join(sys.orig_argv) + "\n")
            self.file.write(name + "\n")
        return None  # the usual finders import it


if _FOLDER:
    sys.meta_path.insert(0, _Recorder(_FOLDER))
