"""Whether a store is fit for a worker to run on: reachable, holding
conditional writes, and not a copy of another store.

Each of these fails every run alike when it does not hold, so a worker
checks them once at its start (``JobRunner.check_store``) and refuses with
one clear error, instead of retrying for ever, running on a store that
ignores conditional writes, or running a copy's runs again.
"""

from __future__ import annotations

from stepstone.records.layout import Layout
from stepstone.store import NotFound, ObjectStore, StoreConfigError
from stepstone.store.conformance import refuse_unconditional


async def check_fit_to_run(store: ObjectStore, layout: Layout) -> None:
    """A LIST of at most one key under ``layout``'s prefix, a compare-and-swap
    that must not land (:func:`stepstone.store.conformance.refuse_unconditional`)
    and a read of the copy mark; raises StoreConfigError or StoreUnavailable."""
    await store.list(layout.outcomes(), limit=1)
    await refuse_unconditional(store)
    await refuse_a_copy(store, layout)


async def refuse_a_copy(store: ObjectStore, layout: Layout) -> None:
    """A copy of a store is history: its leases are stale and its runs
    ran elsewhere, so a worker on it would run them again."""
    mark = layout.copy_mark()
    try:
        said = (await store.get(mark)).data[:200].decode(errors="replace").strip()
    except NotFound:
        return
    raise StoreConfigError(
        f"this store is marked as a copy ({mark}: {said!r}): its leases are stale and "
        "its runs belong to the store it was copied from, so no worker runs on it; "
        "inspect it with stepstone ls, show or ui",
        location=store.location,
    )
