"""A real S3-compatible server for the tests: moto's server mode (``python -m moto.server``, what dask
and s3fs test against), on 127.0.0.1 at a free port, in its own process group, stopped at the end.

Its state lives in the server's memory: nothing is written on disk. The tests reach it through the
standard AWS variables (:meth:`S3Server.environment`), as a user's pcqr would reach a real bucket.
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass

STARTUP_TIMEOUT = 30.0
#: The credentials the tests use (moto accepts any): distinctive, so a test can look for them in outputs.
ACCESS_KEY, SECRET_KEY = "AKIAPCQRTESTKEY00001", "pcqr-test-secret-never-printed-0123456789"


def find_moto() -> str | None:
    """Why moto's server cannot run here (None: it can)."""
    for module in ("moto", "flask", "flask_cors", "boto3"):
        if importlib.util.find_spec(module) is None:
            return f"the S3 tests need moto's server mode and boto3 ({module} is missing): pip install '.[test]'"
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class S3Server:
    """One moto server; :meth:`stop` kills it."""

    def __init__(self) -> None:
        self.port = _free_port()
        self._client = None
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            assert self.process.poll() is None, "moto's server exited at start"
            try:
                urllib.request.urlopen(self.endpoint, timeout=1).close()
                return
            except OSError:
                assert time.monotonic() < deadline, "moto's server did not answer"
                time.sleep(0.05)

    def environment(self) -> dict[str, str]:
        """The AWS variables that point pcqr at this server."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": SECRET_KEY}

    def client(self):  # type: ignore[no-untyped-def]
        """A boto3 client of the server (made once: making one takes about 0.1 s)."""
        if self._client is None:
            import boto3

            self._client = boto3.session.Session().client(
                "s3", endpoint_url=self.endpoint, region_name="us-east-1", aws_access_key_id=ACCESS_KEY,
                aws_secret_access_key=SECRET_KEY)
        return self._client

    def create_bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return sorted(item["Key"] for page in pages for item in page.get("Contents", []))

    def read(self, bucket: str, key: str) -> bytes:
        return bytes(self.client().get_object(Bucket=bucket, Key=key)["Body"].read())

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)


@dataclass
class Bucket:
    """One test's bucket on the server."""

    server: S3Server
    name: str

    def uri(self, path: str = "") -> str:
        return f"s3://{self.name}/{path}".rstrip("/")

    def keys(self, prefix: str = "") -> list[str]:
        return self.server.keys(self.name, prefix)

    def read(self, key: str) -> bytes:
        return self.server.read(self.name, key)
