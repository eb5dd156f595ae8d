"""`s3://bucket/key` paths for the Python sources (ParquetSource), read through pyarrow's S3 file
system, set up from the same environment as croupier's own S3 client (docs/operations.md, "Data in
an object store"): AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL, AWS_REGION or AWS_DEFAULT_REGION
(default us-east-1), CROUPIER_S3_ADDRESSING (path or virtual; path with an explicit endpoint),
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN (else the shared credentials file
and AWS_PROFILE, as pyarrow's AWS SDK reads them), AWS_CA_BUNDLE, and CROUPIER_S3_MAX_ATTEMPTS,
CROUPIER_S3_CONNECT_TIMEOUT_SECONDS and CROUPIER_S3_READ_TIMEOUT_SECONDS (6 attempts, 5 s and
20 s, as croupier's client). pyarrow reads a Parquet file's column chunks with ranged GETs and
retries throttling and broken connections itself.

A glob matches keys as a file system glob does: `*`, `?` and `[...]` never cross a `/`."""
import os
import re
from typing import Any, List, Tuple

from croupier import errors

__all__ = ["is_s3", "s3_filesystem", "expand_s3", "open_s3", "describe_s3_error"]


def is_s3(path: str) -> bool:
    return path.startswith("s3://")


def _split(path: str) -> Tuple[str, str]:
    """("bucket", "key") of s3://bucket/key."""
    rest = path[len("s3://"):]
    bucket, _, key = rest.partition("/")
    if not bucket or not key:
        raise errors.InvalidArgumentError(f"{path}: an object path is s3://BUCKET/KEY")
    return bucket, key


def _number(name: str, default: float, integer: bool = False) -> Any:
    value = os.environ.get(name, "")
    if not value:
        return default
    try:
        got = int(value) if integer else float(value)
    except ValueError:
        got = -1
    if got <= 0:
        raise errors.InvalidArgumentError(f"{name}='{value}' is not a positive number")
    return got


def s3_filesystem() -> Any:
    """pyarrow.fs.S3FileSystem from the environment (see the module doc)."""
    try:
        import pyarrow.fs as pafs
    except ImportError:
        raise errors.FailedPreconditionError(
            "s3:// paths of a Python source need pyarrow (pip install pyarrow)") from None
    env = os.environ
    endpoint = (env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or "").rstrip("/")
    if endpoint and not endpoint.startswith(("http://", "https://")):
        raise errors.InvalidArgumentError(
            f"the S3 endpoint '{endpoint}' (AWS_ENDPOINT_URL) must start with http:// or https://")
    addressing = env.get("CROUPIER_S3_ADDRESSING", "")
    if addressing not in ("", "path", "virtual"):
        raise errors.InvalidArgumentError(
            f"CROUPIER_S3_ADDRESSING='{addressing}' is neither 'path' nor 'virtual'")
    kwargs = dict(
        region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
        force_virtual_addressing=addressing == "virtual" or (not addressing and not endpoint),
        connect_timeout=_number("CROUPIER_S3_CONNECT_TIMEOUT_SECONDS", 5.0),
        request_timeout=_number("CROUPIER_S3_READ_TIMEOUT_SECONDS", 20.0),
        retry_strategy=pafs.AwsStandardS3RetryStrategy(
            max_attempts=_number("CROUPIER_S3_MAX_ATTEMPTS", 6, integer=True)))
    if endpoint:
        kwargs["endpoint_override"] = endpoint
    if env.get("AWS_ACCESS_KEY_ID"):
        kwargs.update(access_key=env["AWS_ACCESS_KEY_ID"],
                      secret_key=env.get("AWS_SECRET_ACCESS_KEY", ""))
        if env.get("AWS_SESSION_TOKEN"):
            kwargs["session_token"] = env["AWS_SESSION_TOKEN"]
    if env.get("AWS_CA_BUNDLE"):
        kwargs["tls_ca_file_path"] = env["AWS_CA_BUNDLE"]
    return pafs.S3FileSystem(**kwargs)


def describe_s3_error(path: str, e: BaseException) -> Exception:
    """The croupier error for pyarrow's error `e` about object `path`, naming it."""
    text = str(e)
    if isinstance(e, FileNotFoundError):
        return errors.NotFoundError(f"{path}: no such object (or no such bucket)")
    if "ACCESS_DENIED" in text or "AccessDenied" in text or "InvalidAccessKeyId" in text or \
            "SignatureDoesNotMatch" in text:
        return errors.PermissionDeniedError(f"{path}: the store refused the credentials: {text}")
    if "NETWORK_CONNECTION" in text or "Could not connect" in text or "curlCode" in text:
        return errors.UnavailableError(f"{path}: the store cannot be reached: {text}")
    return errors.DataLossError(f"{path}: {text}")


def _glob_regex(pattern: str) -> "re.Pattern[str]":
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and "]" in pattern[i + 1:]:
            j = pattern.index("]", i + 1)
            body = pattern[i + 1:j]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append(f"[{body}]")
            i = j
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out) + r"\Z")


def expand_s3(pattern: str, filesystem: Any) -> List[str]:
    """The objects `pattern` names, sorted: itself if it has no wildcard, else the keys under its
    prefix that match. NotFoundError when nothing matches."""
    import pyarrow.fs as pafs
    bucket, key = _split(pattern)
    wild = [k for k, c in enumerate(key) if c in "*?["]
    try:
        if not wild:
            info = filesystem.get_file_info(f"{bucket}/{key}")
            if info.type != pafs.FileType.File:
                raise errors.NotFoundError(f"{pattern}: no such object")
            return [pattern]
        prefix = key[:wild[0]]
        folder = prefix[:prefix.rfind("/")] if "/" in prefix else ""
        selector = pafs.FileSelector(f"{bucket}/{folder}".rstrip("/"), recursive=True,
                                     allow_not_found=True)
        infos = filesystem.get_file_info(selector)
    except errors.Error:
        raise
    except Exception as e:
        raise describe_s3_error(pattern, e) from None
    match = _glob_regex(key)
    found = sorted(f"s3://{i.path}" for i in infos if i.type == pafs.FileType.File
                   and match.match(i.path[len(bucket) + 1:]))
    if not found:
        raise errors.NotFoundError(f"no object matches {pattern}")
    return found


def open_s3(path: str, filesystem: Any) -> Any:
    """A random-access file of object `path` (pyarrow's, read by ranged GETs)."""
    bucket, key = _split(path)
    try:
        return filesystem.open_input_file(f"{bucket}/{key}")
    except Exception as e:
        raise describe_s3_error(path, e) from None
