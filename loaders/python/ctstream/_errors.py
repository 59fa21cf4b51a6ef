"""ctstream's exceptions: every failure is a ``ctstream.Error`` (attributes ``kind``, ``file``,
``tensor``; the native module raises the class registered here for its kind) and also an instance
of the builtin exception people catch for it."""
from __future__ import annotations

import builtins

from . import _ctstream as _native
from ._ctstream import Error



class NotFoundError(Error, builtins.KeyError):
    """No tensor (or stored part) of that name. Also a KeyError."""

    __str__ = builtins.Exception.__str__  # the message as written, not KeyError's repr of it


class FileNotFoundError(Error, builtins.FileNotFoundError):  # noqa: A001 - the builtin's name, on purpose
    """The path to open does not exist. Also a builtins.FileNotFoundError (an OSError)."""


class InvalidArgumentError(Error, builtins.ValueError):
    """A request out of range or that this build cannot serve (dtype, conversion, out= array, budget
    string, ...). Also a ValueError."""


class IndexError(Error, builtins.IndexError):  # noqa: A001
    """An index or slice out of range. Also a builtins.IndexError."""


class ClosedError(InvalidArgumentError):
    """An operation on a closed checkpoint."""


class OutOfMemoryError(Error, builtins.MemoryError):
    """An allocation failed. Also a MemoryError."""


class IOError(Error, builtins.OSError):  # noqa: A001
    """The OS refused an open / read / write. Also an OSError."""


Error.kind, Error.file, Error.tensor = "error", "", ""  # defaults for errors raised in Python
NotFoundError.kind, FileNotFoundError.kind, InvalidArgumentError.kind = "not_found", "file_not_found", "invalid_argument"
IndexError.kind, ClosedError.kind, OutOfMemoryError.kind, IOError.kind = "index", "closed", "out_of_memory", "io"

_native._error_classes.update({
    "not_found": NotFoundError, "file_not_found": FileNotFoundError, "invalid_argument": InvalidArgumentError,
    "unsupported": InvalidArgumentError, "buffer_too_small": InvalidArgumentError, "index": IndexError,
    "closed": ClosedError, "out_of_memory": OutOfMemoryError, "io": IOError,
})
