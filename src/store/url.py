"""open_store: one string picks the backend, so configuration is a URL, not code.

    memory://            a fresh in-process store (``memory://name`` labels it)
    ./jobs.db, /srv/jobs.db
                         a SqliteStore in that file (relative to the cwd)
    sqlite:///srv/jobs.db
                         the same, as a URL (``?synchronous=normal``: see SqliteStore)
    ./jobs, /srv/jobs    a FileStore on that directory (relative to the cwd)
    file:///srv/jobs     the same, as a URL (``?sync=fsync`` picks the flush,
                         ``?commit_in=thread`` where batches commit; see FileStore)
    s3://bucket/prefix?endpoint_url=http://localhost:9000&region=eu-west-1
                         (``&header=X-Tigris-Consistent:true`` sends a
                         provider's own header with every request;
                         ``&object_turns=true`` paces each object's writes,
                         for a store that limits them: GCS;
                         ``&etag_quotes=bare`` and ``&conditional_delete=false``
                         say what a provider does with conditions, found out
                         otherwise: stepstone.store.s3.dialect)

A URL opens a store that exists; it creates none. As no bucket is created,
no database file or directory is: a relative path means another file to
every process started elsewhere, and a process that created its own would
wait on an empty store while the jobs sit in the other. So an API process, a
worker and the ``stepstone`` command agree on what a URL names, or fail at
once. A path names a SqliteStore when it is a file (an empty file is an
empty store: ``touch jobs.db``), a FileStore when it is a directory.
(``SqliteStore(path)`` and ``FileStore(path)``, in code, create theirs.)

S3 credentials come from the usual AWS sources (environment, shared config,
``profile=``, instance role), never from the URL, so a URL can be logged.
Unknown query parameters are refused rather than ignored: a typo in
``endpont_url`` would otherwise silently send requests to AWS.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

from .base import ObjectStore
from .errors import StoreConfigError
from .file import FileStore
from .memory import MemoryStore
from .retry import RetryPolicy
from .sqlite import SqliteStore


class _HasNow(Protocol):
    def now(self) -> float: ...


def boolean(raw: str) -> bool:
    """``true`` or ``false`` (``1``/``0``, ``yes``/``no``)."""
    answer = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
    try:
        return answer[raw.lower()]
    except KeyError:
        raise ValueError(raw) from None


_S3_PARAMS: dict[str, Callable[[str], Any]] = {
    "endpoint_url": str,
    "region": str,
    "profile": str,
    "connect_timeout": float,
    "read_timeout": float,
    "max_connections": int,
    "object_turns": boolean,
    "etag_quotes": str,
    "conditional_delete": boolean,
}
_RETRY_PARAMS = {"retry_attempts": int, "retry_base": float, "retry_cap": float}


_MULTIPART_PARAMS: dict[str, Callable[[str], Any]] = {
    "multipart_threshold": int,
    "multipart_part_size": int,
    "multipart_conditional": boolean,
}
"""The fields of the S3Store's ``Multipart`` (stepstone.store.s3.large)."""


def open_store(url: str, *, clock: Callable[[], float] | _HasNow | None = None) -> ObjectStore:
    """The store a URL names. ``clock`` sets a MemoryStore's ``modified`` times
    (a callable or anything with ``now()``); durable stores use their own clock.

    Raises StoreConfigError naming the URL when it is malformed, and naming
    the directory when a path or file URL names none.
    """
    if not isinstance(url, str) or not url.strip():
        raise StoreConfigError(f"empty store URL {url!r}", location=str(url))
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "memory":
        if parts.path.strip("/") or parts.query:
            raise _bad(url, "a memory URL is memory:// or memory://name")
        now = clock.now if clock is not None and hasattr(clock, "now") else clock
        return MemoryStore(clock=now, name=parts.netloc)
    if scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path:
            raise _bad(url, "a file URL is file:///absolute/path")
        options = _file_options(url, parts.query)
        return FileStore(_existing(url, Path(unquote(parts.path)), "directory"), **options)
    if scheme == "sqlite":
        if parts.netloc not in ("", "localhost") or not parts.path:
            raise _bad(url, "a sqlite URL is sqlite:///absolute/path/jobs.db")
        options = _sqlite_options(url, parts.query)
        return SqliteStore(
            _existing(url, Path(unquote(parts.path)), "file"), create=False, **options
        )
    if scheme == "s3":
        return _s3(url, parts.netloc, unquote(parts.path), parts.query)
    if scheme == "":
        path = Path(url).expanduser()
        if path.resolve().is_file():
            return SqliteStore(path.resolve(), create=False)
        return FileStore(_existing(url, path, "path"))
    raise _bad(
        url, f"unknown scheme {parts.scheme!r}; use memory://, sqlite://, file://, s3:// or a path"
    )


def _existing(url: str, path: Path, kind: str) -> Path:
    """The existing ``kind`` ("file", "directory", or "path": either) that
    ``path`` names, resolved; StoreConfigError if there is none."""
    resolved = path.resolve()
    if resolved.is_file() if kind == "file" else resolved.is_dir():
        return resolved
    what = f"is not a {kind}" if resolved.exists() else "does not exist"
    cwd = os.getcwd()
    against = "" if path.is_absolute() else f" (relative to the working directory {cwd!r})"
    makes = {"file": "touch", "directory": "mkdir"}
    how = " or ".join(
        f"{make} it for an empty {'SQLite' if k == 'file' else 'directory'} store"
        for k, make in makes.items()
        if kind in (k, "path")
    )
    raise StoreConfigError(
        f"no store at {str(resolved)!r}{against}: the {kind} {what}. A store URL opens "
        f"a store and creates none: create it first ({how})",
        location=url,
    )


def _sqlite_options(url: str, query: str) -> dict[str, Any]:
    params = _params(url, query)
    unknown = set(params) - {"synchronous"}
    if unknown:
        raise _bad(url, f"unknown parameter {sorted(unknown)[0]!r} (known: synchronous)")
    if params.get("synchronous", "full") not in ("full", "normal"):
        raise _bad(url, f"synchronous={params['synchronous']!r}: use full or normal")
    return params


def _file_options(url: str, query: str) -> dict[str, Any]:
    params = _params(url, query)
    unknown = set(params) - {"sync", "commit_in"}
    if unknown:
        raise _bad(url, f"unknown parameter {sorted(unknown)[0]!r} (known: commit_in, sync)")
    if "sync" in params and params["sync"] not in ("auto", "syncfs", "fsync"):
        raise _bad(url, f"sync={params['sync']!r}: use auto, syncfs or fsync")
    if "commit_in" in params and params["commit_in"] not in ("auto", "thread", "process"):
        raise _bad(url, f"commit_in={params['commit_in']!r}: use auto, thread or process")
    return params


def _params(url: str, query: str) -> dict[str, str]:
    """The query's parameters, each given once."""
    try:
        parsed = parse_qs(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError as exc:
        raise _bad(url, f"malformed query: {exc}") from exc
    for name, values in parsed.items():
        if len(values) != 1:
            raise _bad(url, f"{name} given more than once")
    return {name: values[0] for name, values in parsed.items()}


def _s3(url: str, bucket: str, path: str, query: str) -> ObjectStore:
    from .s3 import S3Store

    if not bucket:
        raise _bad(url, "no bucket: use s3://bucket/prefix")
    kwargs: dict[str, Any] = {}
    retry: dict[str, Any] = {}
    multipart: dict[str, Any] = {}
    for name, raw in _params(url, query).items():
        if name == "header":  # a provider's own header, Name:value (Tigris needs one)
            header, sep, value = raw.partition(":")
            if not sep or not header.strip() or any(c in header for c in " \r\n"):
                raise _bad(url, f"header={raw!r}: use header=Name:value")
            kwargs["headers"] = {header.strip(): value.strip()}
            continue
        convert = _S3_PARAMS.get(name) or _RETRY_PARAMS.get(name) or _MULTIPART_PARAMS.get(name)
        if convert is None:
            known = ", ".join(sorted([*_S3_PARAMS, *_RETRY_PARAMS, *_MULTIPART_PARAMS, "header"]))
            raise _bad(url, f"unknown parameter {name!r} (known: {known})")
        try:
            value = convert(raw)
        except ValueError as exc:
            raise _bad(url, f"{name}={raw!r} is not a {convert.__name__}") from exc
        group = kwargs if name in _S3_PARAMS else retry if name in _RETRY_PARAMS else multipart
        group[name] = value
    if retry:
        try:
            kwargs["retry"] = RetryPolicy(**{k.removeprefix("retry_"): v for k, v in retry.items()})
        except ValueError as exc:
            raise _bad(url, str(exc)) from exc
    if multipart:
        from .s3.large import Multipart

        try:
            fields = {k.removeprefix("multipart_"): v for k, v in multipart.items()}
            kwargs["multipart"] = Multipart(**fields)
        except ValueError as exc:
            raise _bad(url, str(exc)) from exc
    try:
        return S3Store(bucket, path.strip("/"), **kwargs)
    except StoreConfigError as exc:
        raise _bad(url, exc.message) from exc


def _bad(url: str, why: str) -> StoreConfigError:
    return StoreConfigError(f"bad store URL {url!r}: {why}")
