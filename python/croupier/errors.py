"""Exceptions raised by croupier: one class per error code of the C++ library.

Each message is the C++ library's own message, which names the cause: the file and byte offset,
the feature, the address or the setting. The class tells the caller what to do next:

- InvalidArgumentError, DataLossError: bad input; fix the request or the data.
- NotFoundError: a file or a job that does not exist.
- UnavailableError, DeadlineExceededError: a component cannot be reached now; retry.
- AbortedError: retry the whole operation (for example a file changed while it was indexed).
- FailedPreconditionError: fix the state first.
"""
from typing import Dict, Type


class Error(Exception):
    """Base class of every croupier error. `code` is the error code's name."""

    code = "UNKNOWN"


# One class per code; a code that has a Python built-in counterpart also derives from it, so that
# `except ValueError` (say) catches an INVALID_ARGUMENT.
class CancelledError(Error):
    code = "CANCELLED"


class UnknownError(Error):
    code = "UNKNOWN"


class InvalidArgumentError(Error, ValueError):
    code = "INVALID_ARGUMENT"


class DeadlineExceededError(Error, TimeoutError):
    code = "DEADLINE_EXCEEDED"


class NotFoundError(Error, LookupError):
    code = "NOT_FOUND"


class AlreadyExistsError(Error):
    code = "ALREADY_EXISTS"


class PermissionDeniedError(Error, PermissionError):
    code = "PERMISSION_DENIED"


class ResourceExhaustedError(Error):
    code = "RESOURCE_EXHAUSTED"


class FailedPreconditionError(Error):
    code = "FAILED_PRECONDITION"


class AbortedError(Error):
    code = "ABORTED"


class OutOfRangeError(Error, IndexError):
    code = "OUT_OF_RANGE"


class UnimplementedError(Error, NotImplementedError):
    code = "UNIMPLEMENTED"


class InternalError(Error):
    code = "INTERNAL"


class UnavailableError(Error, ConnectionError):
    code = "UNAVAILABLE"


class DataLossError(Error):
    code = "DATA_LOSS"


class UnauthenticatedError(Error, PermissionError):
    code = "UNAUTHENTICATED"


# The numeric codes (absl::StatusCode) that the C++ module passes and that a Python function
# handing an error back to C++ (a map producer's batch maker) returns. Named here, once.
CANCELLED = 1
UNKNOWN = 2
INVALID_ARGUMENT = 3
DEADLINE_EXCEEDED = 4
NOT_FOUND = 5
ALREADY_EXISTS = 6
PERMISSION_DENIED = 7
RESOURCE_EXHAUSTED = 8
FAILED_PRECONDITION = 9
ABORTED = 10
OUT_OF_RANGE = 11
UNIMPLEMENTED = 12
INTERNAL = 13
UNAVAILABLE = 14
DATA_LOSS = 15
UNAUTHENTICATED = 16

# Indexed by the numeric code.
BY_CODE: Dict[int, Type[Error]] = {
    CANCELLED: CancelledError,
    UNKNOWN: UnknownError,
    INVALID_ARGUMENT: InvalidArgumentError,
    DEADLINE_EXCEEDED: DeadlineExceededError,
    NOT_FOUND: NotFoundError,
    ALREADY_EXISTS: AlreadyExistsError,
    PERMISSION_DENIED: PermissionDeniedError,
    RESOURCE_EXHAUSTED: ResourceExhaustedError,
    FAILED_PRECONDITION: FailedPreconditionError,
    ABORTED: AbortedError,
    OUT_OF_RANGE: OutOfRangeError,
    UNIMPLEMENTED: UnimplementedError,
    INTERNAL: InternalError,
    UNAVAILABLE: UnavailableError,
    DATA_LOSS: DataLossError,
    UNAUTHENTICATED: UnauthenticatedError,
}


class BatchError(Exception):
    """A batch of a map job could not be made (a record's read, decode or transform failed, or
    the batch does not match the job's features): the message names the record and the cause;
    `code` is the numeric code the producer hands to C++ with it."""

    def __init__(self, message: str, code: int = INVALID_ARGUMENT) -> None:
        super().__init__(message)
        self.code = code


def code_of(error: Error, default: int = INVALID_ARGUMENT) -> int:
    """The numeric code of a croupier error (`default` for an unknown name)."""
    for number, cls in BY_CODE.items():
        if cls.code == error.code:
            return number
    return default
