"""Errors the engine raises for bad input; each message names the file and the fix."""


class EdgeprofError(Exception):
    """Base class: a problem with the user's input or environment, not a bug."""


class ModelError(EdgeprofError):
    """A deploy prototxt or caffemodel the engine cannot use."""


class CorruptModelError(ModelError):
    """A caffemodel whose bytes are not valid protobuf wire format (truncated or corrupt)."""

    def __init__(self, path: str, offset: int, what: str) -> None:
        super().__init__(f"{path}: corrupt or truncated caffemodel at byte {offset}: {what}")
        self.path = path
        self.offset = offset


class RunFailed(Exception):
    """A run that yields no result, through no fault of its input (a run folder that could
    not be written, a failed run that ``--force`` would have put over an earlier result):
    exit 1, never the bad-input exit 2."""
