"""Exceptions raised by croupier: one class per error code of the C++ library.

Each message is the C++ library's own message, which names the cause: the file and byte offset,
the feature, the address or the setting. The class tells the caller what to do next:

- InvalidArgumentError, DataLossError: bad input; fix the request or the data.
- NotFoundError: a file or a job that does not exist.
- UnavailableError, DeadlineExceededError: a component cannot be reached now; retry.
- AbortedError: retry the whole operation (for example a file changed while it was indexed).
- FailedPreconditionError: fix the state first.
"""


class Error(Exception):
    """Base class of every croupier error. `code` is the error code's name."""

    code = "UNKNOWN"


def _make(name, code, *bases):
    return type(name, (Error,) + bases, {"code": code, "__module__": __name__})


CancelledError = _make("CancelledError", "CANCELLED")
UnknownError = _make("UnknownError", "UNKNOWN")
InvalidArgumentError = _make("InvalidArgumentError", "INVALID_ARGUMENT", ValueError)
DeadlineExceededError = _make("DeadlineExceededError", "DEADLINE_EXCEEDED", TimeoutError)
NotFoundError = _make("NotFoundError", "NOT_FOUND", LookupError)
AlreadyExistsError = _make("AlreadyExistsError", "ALREADY_EXISTS")
PermissionDeniedError = _make("PermissionDeniedError", "PERMISSION_DENIED", PermissionError)
ResourceExhaustedError = _make("ResourceExhaustedError", "RESOURCE_EXHAUSTED")
FailedPreconditionError = _make("FailedPreconditionError", "FAILED_PRECONDITION")
AbortedError = _make("AbortedError", "ABORTED")
OutOfRangeError = _make("OutOfRangeError", "OUT_OF_RANGE", IndexError)
UnimplementedError = _make("UnimplementedError", "UNIMPLEMENTED", NotImplementedError)
InternalError = _make("InternalError", "INTERNAL")
UnavailableError = _make("UnavailableError", "UNAVAILABLE", ConnectionError)
DataLossError = _make("DataLossError", "DATA_LOSS")
UnauthenticatedError = _make("UnauthenticatedError", "UNAUTHENTICATED", PermissionError)

# Indexed by the numeric absl::StatusCode, which the C++ module passes.
BY_CODE = {
    1: CancelledError,
    2: UnknownError,
    3: InvalidArgumentError,
    4: DeadlineExceededError,
    5: NotFoundError,
    6: AlreadyExistsError,
    7: PermissionDeniedError,
    8: ResourceExhaustedError,
    9: FailedPreconditionError,
    10: AbortedError,
    11: OutOfRangeError,
    12: UnimplementedError,
    13: InternalError,
    14: UnavailableError,
    15: DataLossError,
    16: UnauthenticatedError,
}
