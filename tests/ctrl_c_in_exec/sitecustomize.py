"""Imported at the start of every Python process that has this folder on PYTHONPATH: with
EDGEPROF_TEST_CTRL_C_AT naming a module, the process raises KeyboardInterrupt, from code
compiled from a string, when it first imports that module: as a Ctrl-C does that arrives
while a dataclass or a namedtuple being defined runs the code it generated."""

import os
import sys

_AT = os.environ.get("EDGEPROF_TEST_CTRL_C_AT")


class _CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == _AT:
            exec("raise KeyboardInterrupt")
        return None  # the usual finders import it


if _AT:
    sys.meta_path.insert(0, _CtrlC())
