"""Payload codecs named by configuration: what ``stepstone worker``, the
CLI and the web view take from ``--codec`` or the environment, and what an
application may take the same way (:func:`codecs_from_env`).

``STEPSTONE_CODEC`` (or ``--codec``) names the codecs in the order they
are applied, by comma: ``zstd``, ``zlib``, ``aes-gcm``, or ``MODULE:ATTR``
naming a zero-argument callable that returns your own codec; e.g.
``zstd,aes-gcm``. The keys of ``aes-gcm`` are never named on a command
line: ``STEPSTONE_KEYS`` holds them (``k2=BASE64,k1=BASE64``, the
encrypting one first), or ``STEPSTONE_KEYS_FILE`` names a file holding
them in the same form (by comma or one a line; ``#`` starts a comment).

``STEPSTONE_SEAL_ERRORS=1`` (or ``stepstone worker --seal-errors``) has a
worker seal the error texts it writes with those codecs
(``JobRunner(seal_errors=True)``, :mod:`stepstone.records.error_texts`).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from typing import Any

from stepstone.records.compression import ZlibCodec, ZstdCodec
from stepstone.records.encryption import AesGcmCodec
from stepstone.records.payloads import PayloadCodec

ENV_CODEC = "STEPSTONE_CODEC"
ENV_KEYS = "STEPSTONE_KEYS"
ENV_KEYS_FILE = "STEPSTONE_KEYS_FILE"
ENV_SEAL_ERRORS = "STEPSTONE_SEAL_ERRORS"
_YES = ("1", "true", "yes", "on")
_NO = ("", "0", "false", "no", "off")


def codecs_from_env(
    spec: str | None = None, environ: Mapping[str, str] | None = None
) -> list[PayloadCodec]:
    """The codecs ``spec`` names (else ``STEPSTONE_CODEC``; none when neither
    is set), keys from ``STEPSTONE_KEYS`` or ``STEPSTONE_KEYS_FILE``.
    ValueError saying what is wrong with the configuration."""
    env = os.environ if environ is None else environ
    text = spec if spec is not None else env.get(ENV_CODEC, "")
    codecs: list[PayloadCodec] = []
    for name in (part.strip() for part in text.split(",")):
        if not name:
            continue
        if name == "zstd":
            codecs.append(ZstdCodec())
        elif name == "zlib":
            codecs.append(ZlibCodec())
        elif name == "aes-gcm":
            codecs.append(AesGcmCodec(keys_from_env(env)))
        elif ":" in name:
            codecs.append(_user_codec(name))
        else:
            raise ValueError(
                f"no payload codec {name!r}: zstd, zlib, aes-gcm, or MODULE:ATTR of your own"
            )
    return codecs


def seal_errors_from_env(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``STEPSTONE_SEAL_ERRORS`` asks for error texts to be sealed
    (``1``, ``true``, ``yes``, ``on``; unset, ``0``, ``false``, ``no``, ``off``:
    not). ValueError for anything else."""
    env = os.environ if environ is None else environ
    value = env.get(ENV_SEAL_ERRORS, "").strip().lower()
    if value in _YES:
        return True
    if value in _NO:
        return False
    raise ValueError(f"{ENV_SEAL_ERRORS} is 1 or 0 (true/false, yes/no, on/off), not {value!r}")


def keys_from_env(environ: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """The ``(key id, base64 key)`` pairs of ``STEPSTONE_KEYS``, else of the
    file ``STEPSTONE_KEYS_FILE`` names, in order. ValueError when neither
    holds a key, or an entry is not ``ID=BASE64``."""
    env = os.environ if environ is None else environ
    text, where = env.get(ENV_KEYS, ""), ENV_KEYS
    if not text.strip() and env.get(ENV_KEYS_FILE):
        where = env[ENV_KEYS_FILE]
        try:
            with open(where, encoding="utf-8") as file:
                text = file.read()
        except OSError as exc:
            raise ValueError(f"{ENV_KEYS_FILE}: cannot read {where}: {exc.strerror}") from None
    pairs = []
    for line in text.splitlines():
        for entry in line.split("#", 1)[0].split(","):
            if not entry.strip():
                continue
            key_id, sep, key = entry.strip().partition("=")
            if not sep or not key_id.strip():
                # (never echo the entry: it may be a key)
                raise ValueError(f"{where}: an entry is not ID=BASE64")
            pairs.append((key_id.strip(), key.strip()))
    if not pairs:
        raise ValueError(f"the aes-gcm codec needs keys: set {ENV_KEYS} or {ENV_KEYS_FILE}")
    return pairs


def _user_codec(spec: str) -> PayloadCodec:
    module_name, _, attr = spec.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"payload codec {spec!r}: {exc}") from None
    made = isinstance(target, type) or (callable(target) and not isinstance(target, PayloadCodec))
    codec = target() if made else target  # (a class or a factory: called with no arguments)
    if isinstance(codec, type) or not isinstance(codec, PayloadCodec):
        raise ValueError(f"payload codec {spec!r} gave a {type(codec).__name__}, not a codec")
    return codec
