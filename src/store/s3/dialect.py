"""What a provider does with S3's conditions, learned from its answers.

S3-compatible services differ on exactly the conditional requests stepstone
rests on (docs/storage.md, "Running on your provider"). Ceph's RADOS Gateway
16 (measured on 16.2.15, Debian's ``radosgw``):

- compares ``If-Match`` with the stored etag *without* its quotes, so the
  quoted form AWS takes is refused with 412 though it is current (so does
  DigitalOcean Spaces, by report);
- ignores ``If-Match`` on DeleteObject (a stale etag deletes);
- ignores ``If-None-Match`` on CompleteMultipartUpload (it overwrites);
- answers 412, not 404, to ``If-Match`` on a missing key;
- answers the loser of an ``If-Match`` race 500 (InternalError), not 412.

An S3Store learns the first three once per process and bucket (shared by
every store of the process on that endpoint and bucket, as the send rates
are), so it works on such a store as it is, without a setting, and never
takes a refusal it cannot explain for an answer:

- **The etag's form** (``etag_quotes``, ``auto`` by default): a swap
  refused while a read shows the etag it was sent is still current was
  refused for its form; the store tries the other form, and keeps the one
  that lands. Until a swap has landed, each refusal is checked so (one
  HEAD); after, a refusal is a lost race and costs nothing more.
- **A store that refuses what holds** fails, never hangs: after
  :data:`REFUSALS` conditions refused though they held (a swap on the
  current etag, a create on a missing key), with none honoured, the store
  raises StoreConfigError saying what the provider does wrong and naming
  ``stepstone check-store``, for this write and every later one.
- **Whether DeleteObject holds If-Match** (``conditional_delete``, ``auto``
  by default): tried once before the first fenced delete, on a scratch key
  (:func:`stepstone.store.s3.probes.probe_conditional_delete`). A store
  that ignores it gets fenced deletes another way: a fenced swap to a
  husk (:mod:`stepstone.store.s3.husks`).
- **Whether CompleteMultipartUpload holds its condition**, tried once before
  the first conditional write in parts, on a store told it does
  (``multipart_conditional``): one that does not is refused with
  StoreConfigError, before it can let two writers of one key both win.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .answers import quoted

EtagQuotes = Literal["auto", "quoted", "bare"]
"""How an S3Store sends an etag in ``If-Match``: as S3 gives it, in double
quotes (``quoted``, what AWS takes), without them (``bare``, what Ceph RGW 16
takes), or found out from the answers (``auto``)."""

ETAG_QUOTES: tuple[EtagQuotes, ...] = ("auto", "quoted", "bare")

REFUSALS = 3
"""Conditions refused though they held, with none honoured between, after
which the store is declared unusable (StoreConfigError)."""


@dataclass
class Learned:
    """What one process learned of one provider's bucket (module docstring)."""

    form: Literal["quoted", "bare"] = "quoted"
    """The etag's form in ``If-Match`` that the store takes (under ``auto``)."""
    swaps_seen: bool = False
    """A swap landed: a refusal from now on is a lost race, not the form."""
    creates_seen: bool = False
    """A create landed: a refused create from now on found the key taken."""
    refused: int = 0
    """Conditions refused though they held, since the last one honoured."""
    broken: str = ""
    """What the store does wrong, once it has refused :data:`REFUSALS` times."""
    conditional_delete: bool | None = None
    """Whether DeleteObject holds If-Match (None: not tried yet)."""
    multipart_conditions: bool | None = None
    """Whether CompleteMultipartUpload holds its condition (None: not tried yet)."""


_LEARNED: dict[str, Learned] = {}


def learned_for(endpoint: str | None, bucket: str) -> Learned:
    """What this process learned of ``bucket`` at ``endpoint`` (shared by its stores)."""
    name = f"{endpoint or ''}|{bucket}"
    found = _LEARNED.get(name)
    if found is None:
        found = _LEARNED[name] = Learned()
    return found


def in_form(etag: str, form: Literal["quoted", "bare"]) -> str:
    """``etag`` as ``If-Match`` carries it in ``form``."""
    return quoted(etag) if form == "quoted" else etag.strip('"')


def refusal_named(setting: EtagQuotes, form: str, what: str) -> str:
    """The message of a store that refuses what holds (``what`` it refused)."""
    hint = {
        "quoted": " It was told to send etags in quotes (etag_quotes=quoted): a store that "
        "compares them without quotes (Ceph RGW 16) needs etag_quotes=bare or auto.",
        "bare": " It was told to send etags without quotes (etag_quotes=bare): a store that "
        "compares them in quotes (AWS) needs etag_quotes=quoted or auto.",
        "auto": " Both forms of the etag, in quotes and without, were tried.",
    }[setting]
    return (
        f"this store refused {REFUSALS} conditional writes whose condition held ({what}, "
        f"last sent with the etag {form}), with none honoured: stepstone cannot run on it "
        f"as it answers.{hint} `stepstone check-store` says what else is missing"
    )


def describe_provider(
    learned: Learned,
    *,
    etag_quotes: EtagQuotes,
    conditional_delete: bool,
    told_delete: bool,
    multipart_conditional: bool,
) -> list[str]:
    """What ``stepstone check-store`` says of the provider: one sentence a
    property, with the store setting that says it up front."""
    notes = []
    if etag_quotes != "auto":
        notes.append(f"If-Match carries the etag as told: etag_quotes={etag_quotes}")
    elif not learned.swaps_seen:
        notes.append("the etag's form in If-Match is not known yet (no swap has landed)")
    elif learned.form == "bare":
        notes.append(
            "If-Match takes the etag without quotes (as Ceph RGW 16 does): found out from "
            "a refused swap; etag_quotes=bare in the store URL says it up front"
        )
    else:
        notes.append("If-Match takes the etag in quotes, as AWS documents")
    if conditional_delete:
        notes.append("DeleteObject holds If-Match: a fenced delete is one DELETE")
    else:
        told = "as told (conditional_delete=false)" if told_delete else "tried"
        notes.append(
            f"DeleteObject ignores If-Match ({told}): a fenced delete is a compare-and-swap "
            "to a husk, then a DELETE of it (one PUT more each)"
            + ("" if told_delete else "; conditional_delete=false in the store URL says it")
        )
    if learned.multipart_conditions:
        notes.append(
            "CompleteMultipartUpload holds If-None-Match and If-Match (an upload over an "
            "existing object was refused under each): multipart_conditional=true may write "
            "conditional values in parts"
        )
    else:
        notes.append(
            "CompleteMultipartUpload ignores If-None-Match or If-Match (an upload over an "
            "existing object replaced it): conditional writes go in one PutObject, up to 5 GiB"
            + ("; remove multipart_conditional=true" if multipart_conditional else "")
        )
    return notes
