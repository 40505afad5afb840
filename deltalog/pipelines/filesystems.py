"""Arrow's filesystems for the files of a table: where a path or URI lives, configured from
the warehouse's storage options (delta-rs's names). Used by the Delta adapter's reads in
this process and by Spark's Python tasks that read a version's files on the executors."""

import os
from collections.abc import Mapping
from typing import Any


def filesystem_of(uri: str, storage: Mapping[str, str]) -> tuple[Any, str]:
    """(Arrow filesystem, path in it) for a file or folder URI, configured from
    delta-rs-style storage options for S3 (others from the URI and the environment)."""
    from urllib.parse import urlparse

    from pyarrow import fs

    parsed = urlparse(uri)
    if parsed.scheme in ("s3", "s3a"):
        endpoint = storage.get("AWS_ENDPOINT_URL") or storage.get("AWS_ENDPOINT")
        kwargs: dict[str, Any] = {}
        if endpoint:
            host = urlparse(endpoint)
            kwargs["endpoint_override"] = host.netloc or endpoint
            kwargs["scheme"] = host.scheme or "https"
        for option, arg in (("AWS_ACCESS_KEY_ID", "access_key"),
                            ("AWS_SECRET_ACCESS_KEY", "secret_key"),
                            ("AWS_SESSION_TOKEN", "session_token"),
                            ("AWS_REGION", "region")):
            if storage.get(option):
                kwargs[arg] = storage[option]
        return fs.S3FileSystem(**kwargs), f"{parsed.netloc}{parsed.path}"
    if "://" not in uri:
        return fs.LocalFileSystem(), os.path.abspath(uri)
    return fs.FileSystem.from_uri(uri)  # type: ignore[no-any-return]
