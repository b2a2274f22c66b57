"""Object storage (S3 and S3-compatible servers): where datasets, logs and released tables may live.

A location ``s3://bucket/key`` names one object; ``s3://bucket/prefix`` used as a folder names the
objects under ``prefix/``. Two clients share one set of settings (:class:`S3Settings`):

* pyarrow's ``S3FileSystem`` reads Parquet (:func:`arrow_filesystem`): workers read their own row
  groups by ranged GETs, the driver reads footers only;
* boto3 (the ``s3`` extra) writes: every object in one ``PutObject``, so a reader sees the old object
  or the whole new one, never half (pyarrow's writer always uses multipart uploads). A log batch is
  written with :func:`put_once`, a conditional put (``If-None-Match: *``) that never replaces an
  object: the commit protocol's "written once" (:mod:`pcqr.pipeline.session.commit`).

Settings come from the standard AWS variables (``AWS_ENDPOINT_URL``, ``AWS_REGION``,
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``), or the same keys under
``pcqr: storage:`` in the cluster.yaml (the environment wins), with two limits only the file sets,
``connect-timeout`` (reaching the endpoint, default 10 s) and ``request-timeout`` (a request's wait for
the endpoint's next byte, default 30 s), for every read and write, each of at most :data:`ATTEMPTS`
attempts; an endpoint that never answers is one line naming the location and the setting
(:func:`timed_out`; issue 47: it took 183 s to fail). They reach the workers with the
cluster's client (:class:`pcqr.pipeline.data.cluster.StorageSettings`). Credentials are never printed, never written into a log's
provenance or a summary, and refused inside a URI (``s3://KEY:SECRET@bucket``, which pcqr would
record).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Mapping

from pcqr.pipeline.errors import PcqrError

if TYPE_CHECKING:
    import pyarrow.fs as pafs

SCHEME = "s3://"
#: The variables (and cluster.yaml keys under ``pcqr: storage:``) pcqr reads, and the settings they fill.
VARIABLES = {"AWS_ENDPOINT_URL": "endpoint_url", "AWS_REGION": "region", "AWS_ACCESS_KEY_ID": "access_key_id",
             "AWS_SECRET_ACCESS_KEY": "secret_access_key", "AWS_SESSION_TOKEN": "session_token"}
#: cluster.yaml's ``pcqr: storage:`` limits (seconds), and the settings they fill.
TIMEOUTS = {"connect-timeout": "connect_timeout", "request-timeout": "request_timeout"}
#: The longest limit accepted: an hour.
MOST_S = 3600.0
#: Attempts of one request (the first and two retries: the AWS SDKs' standard mode), pyarrow's and boto3's.
ATTEMPTS = 3
_EXTRA = "pip install 'pcqr[s3]'"
#: The cluster.yaml every command reads by default (pcqr.pipeline.data.cluster).
DEFAULT_FILE = "cluster.yaml"


@dataclass(frozen=True)
class S3Settings:
    """Where the S3 server is and who pcqr is to it (None: the SDKs' own defaults, e.g. an instance
    role). ``repr`` never shows the secret or the token."""

    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None
    connect_timeout: float = 10.0
    request_timeout: float = 30.0

    def __repr__(self) -> str:
        shown = {f.name: getattr(self, f.name) for f in fields(self)}
        for secret in ("secret_access_key", "session_token"):
            shown[secret] = "***" if shown[secret] else None
        return f"S3Settings({', '.join(f'{k}={v!r}' for k, v in shown.items())})"

    @property
    def secrets(self) -> tuple[str, ...]:
        """The values no output may contain."""
        return tuple(v for v in (self.access_key_id, self.secret_access_key, self.session_token) if v)


_configured: S3Settings | None = None


def settings_from(environment: Mapping[str, str], file_keys: Mapping[str, Any] | None = None,
                  source: str = "cluster.yaml") -> S3Settings:
    """The settings: each AWS variable from ``environment``, else from ``file_keys`` (the cluster.yaml's
    ``pcqr: storage:``), and the file's timeouts. An unknown key of the file, a non-text AWS key or a
    timeout that is not a number of seconds in (0, :data:`MOST_S`] is refused in one line naming it."""
    file_keys = dict(file_keys or {})
    for key, value in file_keys.items():
        if key in TIMEOUTS:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                    math.isfinite(value) and 0 < value <= MOST_S):
                raise PcqrError(f"{source}: pcqr.storage.{key}: expected a number of seconds in (0, {MOST_S:g}], "
                                f"got {value!r}")
        elif key not in VARIABLES:
            raise PcqrError(f"{source}: pcqr.storage.{key}: unknown key (known: {', '.join([*VARIABLES, *TIMEOUTS])})")
        elif value is not None and not (isinstance(value, str) and value.strip()):
            raise PcqrError(f"{source}: pcqr.storage.{key}: expected text")  # the value is never shown
    chosen: dict[str, Any] = {attribute: environment.get(variable) or file_keys.get(variable)
                              for variable, attribute in VARIABLES.items()}
    chosen.update({attribute: float(file_keys[key]) for key, attribute in TIMEOUTS.items() if key in file_keys})
    return S3Settings(**chosen)


def configure(settings: S3Settings | None) -> None:
    """Use ``settings`` in this process from now on (None: the default, :func:`current`)."""
    global _configured
    _configured = settings
    _client.cache_clear()
    _filesystem.cache_clear()
    _default.cache_clear()


def current() -> S3Settings:
    """The settings in effect: those configured (by a command's cluster.yaml, or sent to a worker),
    else the environment's over those of a ``cluster.yaml`` in the current folder (the file every
    command uses by default), read once."""
    return _configured if _configured is not None else _default()


@lru_cache(maxsize=1)
def _default() -> S3Settings:
    from pcqr.pipeline.data.user_files import CONFIG_LIMIT, read_yaml

    keys = None
    if os.path.isfile(DEFAULT_FILE):
        data = read_yaml(DEFAULT_FILE, "cluster.yaml", CONFIG_LIMIT)
        pcqr = data.get("pcqr") if isinstance(data, dict) else None
        keys = pcqr.get("storage") if isinstance(pcqr, dict) else None
    return from_file(os.environ, keys, DEFAULT_FILE)


def from_file(environment: Mapping[str, str], keys: Any, source: str) -> S3Settings:
    """:func:`settings_from` a cluster.yaml's ``pcqr: storage:`` value (None: none given)."""
    if keys is not None and not isinstance(keys, dict):
        raise PcqrError(f"{source}: pcqr.storage: expected a mapping of AWS_* keys and timeouts")
    return settings_from(environment, keys, source)


def is_uri(path: str) -> bool:
    """Whether ``path`` names a location on a server (``s3://...``) rather than a local path."""
    return "://" in str(path)


def split(uri: str) -> tuple[str, str]:
    """``s3://bucket/key`` -> (bucket, key). Anything but ``s3://`` (for writing), a URI without a
    bucket or with credentials in it is refused in one line."""
    if not uri.startswith(SCHEME):
        raise PcqrError(f"{uri}: pcqr writes to s3:// locations only (and local paths)")
    bucket, _, key = uri[len(SCHEME):].partition("/")
    refuse_credentials(uri)
    if not bucket:
        raise PcqrError(f"{uri}: no bucket (s3://BUCKET/PREFIX)")
    return bucket, key.strip("/")


def refuse_credentials(uri: str) -> None:
    """A URI that carries credentials (``s3://KEY:SECRET@bucket``) is refused: pcqr records URIs in
    summaries, ledgers and provenance. Credentials belong in the AWS variables."""
    authority = uri.split("://", 1)[-1].split("/", 1)[0]
    if "@" in authority:
        raise PcqrError(f"{uri.split('://', 1)[0]}://...@{authority.split('@', 1)[1]}: credentials in a URI are "
                        "refused (pcqr records URIs); set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY instead")


def arrow_filesystem() -> "pafs.FileSystem":
    """pyarrow's S3 file system with the current settings (cached while they hold)."""
    return _filesystem(current())


@lru_cache(maxsize=4)
def _filesystem(settings: S3Settings) -> "pafs.FileSystem":
    import pyarrow.fs as pafs

    return pafs.S3FileSystem(access_key=settings.access_key_id, secret_key=settings.secret_access_key,
                             session_token=settings.session_token, region=settings.region,
                             endpoint_override=settings.endpoint_url, connect_timeout=settings.connect_timeout,
                             request_timeout=settings.request_timeout,
                             retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=ATTEMPTS))


@lru_cache(maxsize=4)
def _client(settings: S3Settings) -> Any:
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise PcqrError(f"writing to s3:// needs boto3: {_EXTRA}") from None
    return boto3.session.Session().client(
        "s3", endpoint_url=settings.endpoint_url, region_name=settings.region or "us-east-1",
        aws_access_key_id=settings.access_key_id, aws_secret_access_key=settings.secret_access_key,
        aws_session_token=settings.session_token,
        config=Config(connect_timeout=settings.connect_timeout, read_timeout=settings.request_timeout,
                      retries={"mode": "standard", "total_max_attempts": ATTEMPTS}))


def _call(uri: str, operation: str, **kwargs: Any) -> Any:
    """One S3 request; a failure the user can fix is one line naming the location (never a credential)."""
    try:
        client = _client(current())  # first: without boto3, one line saying how to install it
    except PcqrError as exc:
        raise PcqrError(f"{uri}: {exc}") from None
    from botocore.exceptions import (
        BotoCoreError, ClientError, ConnectTimeoutError, NoCredentialsError, ReadTimeoutError,
    )

    try:
        return getattr(client, operation)(**kwargs)
    except NoCredentialsError:
        raise PcqrError(f"{uri}: no credentials for the S3 server: set AWS_ACCESS_KEY_ID and "
                        "AWS_SECRET_ACCESS_KEY (or pcqr: storage: in the cluster.yaml)") from None
    except ClientError as exc:
        raise _client_error(uri, exc, conditional="IfNoneMatch" in kwargs) from None
    except (ConnectTimeoutError, ReadTimeoutError) as exc:
        raise _no_answer(uri, "connect" if isinstance(exc, ConnectTimeoutError) else "request") from None
    except BotoCoreError as exc:  # the endpoint unreachable, a timeout, ...
        raise PcqrError(f"{uri}: the S3 server cannot be reached ({exc})") from None


def _no_answer(uri: str, limit: str) -> PcqrError:
    seconds = getattr(current(), f"{limit}_timeout")
    return PcqrError(f"{uri}: no answer from the S3 endpoint within {seconds:g} s "
                     f"(pcqr: storage: {limit}-timeout; {ATTEMPTS} attempts)")


def timed_out(uri: str, exc: BaseException) -> PcqrError | None:
    """The one-line error for pyarrow's S3 file system giving up on an endpoint that did not answer
    within the settings' timeouts (curl's code 28), naming ``uri`` and the setting; None for any other
    failure. Each caller that turns pyarrow's OSError into its own line asks this first."""
    text = str(exc)
    if not isinstance(exc, OSError) or "curlCode: 28" not in text:
        return None
    return _no_answer(uri, "connect" if "connect" in text.split("curlCode: 28", 1)[1].lower() else "request")


class _Exists(Exception):
    """A conditional put found the key taken."""


def _client_error(uri: str, exc: Any, conditional: bool) -> Exception:
    error = exc.response.get("Error", {})
    code, status = error.get("Code", ""), exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    if conditional and (code in ("PreconditionFailed", "ConditionalRequestConflict") or status in (409, 412)):
        return _Exists()
    if code == "NoSuchBucket":
        return PcqrError(f"{uri}: the bucket {split(uri)[0]!r} does not exist")
    if code in ("NoSuchKey", "404", "NotFound"):
        return FileNotFoundError(uri)
    if code in ("AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
        return PcqrError(f"{uri}: access denied by the S3 server ({code})")
    return PcqrError(f"{uri}: the S3 server refused it ({code or status}: {error.get('Message', '')})")


def put(uri: str, data: bytes) -> None:
    """Write the object at ``uri`` (replacing it) in one request: readers see the old object or the new."""
    bucket, key = split(uri)
    _call(uri, "put_object", Bucket=bucket, Key=key, Body=data)


def put_once(uri: str, data: bytes) -> bool:
    """Write the object at ``uri`` only if no object is there (``If-None-Match: *``): True when this
    call wrote it, False when the key was taken (by an earlier run: the caller compares the bytes)."""
    bucket, key = split(uri)
    try:
        _call(uri, "put_object", Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
    except _Exists:
        return False
    return True


def delete(uri: str) -> None:
    """Remove the object at ``uri`` (nothing if there is none)."""
    bucket, key = split(uri)
    _call(uri, "delete_object", Bucket=bucket, Key=key)


def check_writable(uri: str, option: str) -> None:
    """Refuse, before any work and any charge, a location pcqr cannot write: not ``s3://``, no such
    bucket, the server unreachable or the credentials refused (one line naming the option)."""
    try:
        bucket, _ = split(uri)
        _call(uri, "head_bucket", Bucket=bucket)
    except FileNotFoundError:
        raise PcqrError(f"{option} {uri}: the bucket does not exist") from None
    except PcqrError as exc:
        raise PcqrError(f"{option} {exc}") from None


__all__ = ["S3Settings", "arrow_filesystem", "check_writable", "configure", "current", "delete",
           "from_file", "is_uri", "put", "put_once", "refuse_credentials", "settings_from",
           "split", "timed_out"]
