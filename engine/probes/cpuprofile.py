"""gperftools' CPU sampling profiler (libprofiler, via ``yep``) around a block of code.

SIGPROF sampling at 100 Hz by default (``CPUPROFILE_FREQUENCY``); view the file with
``google-pprof --text $(which python) cpu.prof``. Native frames only: numpy/BLAS kernels
and the interpreter loop, not Python functions.
"""

from __future__ import annotations

import os

from engine.errors import EdgeprofError


class CpuProfile:
    """``with CpuProfile(path): ...`` writes a gperftools CPU profile to ``path``."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)

    def __enter__(self) -> CpuProfile:
        try:
            import yep
        except ImportError as exc:  # yep raises ImportError when libprofiler is missing
            raise EdgeprofError(f"--cpu-profile needs yep and gperftools' libprofiler ({exc}): "
                                "pip install yep; apt-get install libgoogle-perftools4") from None
        # yep.start() only fails on a negative status, but ProfilerStart() returns 0 on
        # failure (e.g. an unwritable path), so call it directly and check.
        self._lib = yep.libprofiler
        if not self._lib.ProfilerStart(self.path.encode()):
            raise EdgeprofError(f"the CPU profiler could not start writing {self.path} "
                                "(unwritable path, or a profile already running)")
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._lib.ProfilerStop()
