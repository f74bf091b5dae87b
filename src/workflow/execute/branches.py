"""Branches: where a call stands in a run whose code runs concurrently.

A run's code may run concurrently with itself (``asyncio.gather``,
``asyncio.TaskGroup``, ``asyncio.create_task``), and which of its tasks the
event loop runs first is an accident of timing: a retry's reads finish in
another order than the first attempt's steps did. So a call's place in the
run's history cannot be the order in which calls start. It is its place in
the **task tree** instead:

- the run's own task (the one ``Job.run`` runs in) is the **root** branch;
- every task the run's code creates is a **branch**, numbered 1, 2, ... in
  the order its parent task created it, so a branch's **path** is fixed for
  code whose control flow is deterministic (``(2, 1)``: the first task
  created by the root's second);
- a call (a step, a sleep, an event wait, a child submit, a patch) takes the
  next position *inside its branch*.

Neither depends on which task runs first. The path is given when the task
is created, by a task factory installed on the event loop (:func:`install`),
which knows a run's tasks by a context variable (:data:`BRANCH`). What the
run's code creates is, by the coroutine the task runs:

- a coroutine function of the application's: a new branch;
- one of the run's calls (``gather(ctx.step(...), ctx.step(...))``), or
  any coroutine ``asyncio.wait_for`` runs in a task of its own on Pythons
  before 3.12 (from 3.12 it runs it in its caller's): the creating task's
  branch; each such call takes its place as the task first runs, in the
  order the tasks were created;
- anything else (a library's own tasks, stepstone's work for a call, what
  a step's function creates): no part of the run, so that neither a
  library's tasks nor a Python upgrade move the application's branches,
  and a step that is replayed, not run, creates nothing its run would miss.

The tree also keeps the run's live tasks, so that an attempt that ends
leaves nothing of itself running (:func:`stop`): a branch in the middle of
a step finishes that step (its result is recorded), every other task is
cancelled, and all are awaited before the run is settled.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import os
import site
import sys
import sysconfig
from collections.abc import Coroutine
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import stepstone.runtime
import stepstone.store

log = logging.getLogger("stepstone")

STOP_GRACE = 10.0
"""Seconds a task of an ended attempt has to end once cancelled; one that
swallows its cancellation longer is logged and left."""
STOP_CHECK = 0.25
"""How often (seconds) the end of an attempt looks again at its live tasks."""


@dataclass(eq=False)
class Branch:
    """One task of a run's tree: its path, and the positions and children it
    has taken so far in this attempt."""

    tree: RunTree
    path: tuple[int, ...] = ()
    """Its place in the tree: () for the root, (2, 1) for the first task
    created by the root's second."""
    calls: int = 0
    """Positions taken so far: the position of its last call."""
    children: int = 0
    """Branches it has created so far."""
    occurrences: dict[str, int] = field(default_factory=dict)
    """Calls so far by name, for the memos keyed by name (a patch's)."""
    task: asyncio.Task[Any] | None = None

    @property
    def name(self) -> str:
        """``"1.2"``, or ``""`` for the root."""
        return ".".join(str(step) for step in self.path)

    def next_position(self) -> int:
        """The position of this branch's next call (1 for its first)."""
        self.calls += 1
        return self.calls

    def spawn(self) -> Branch:
        """The branch of the next task this one creates."""
        self.children += 1
        return Branch(self.tree, (*self.path, self.children))


BRANCH: contextvars.ContextVar[Branch | None] = contextvars.ContextVar(
    "stepstone_branch", default=None
)
"""The branch the running code belongs to (None outside every run)."""
IN_STEP: contextvars.ContextVar[bool] = contextvars.ContextVar("stepstone_in_step", default=False)
"""Whether the running code is a step's function (what it creates is its own)."""

CALLS = frozenset(
    f"{owner}.{method}"
    for owner, methods in {
        "JobContext": (
            "step",
            "sleep",
            "sleep_until",
            "wait_for_event",
            "submit",
            "gather",
            "patched",
            "deprecate_patch",
            "callback",
            "set_attributes",
        ),
        "Callback": ("wait",),
        "JobHandle": ("result", "join", "_awaited"),
        "StreamWriter": ("write", "close"),
    }.items()
    for method in methods
)
"""The coroutines of a run's calls (by ``co_qualname``): one run as a task of
its own (``gather(ctx.step(...), ctx.step(...))``) is part of the branch
that made it, and is stopped with the attempt."""


class RunTree:
    """One attempt's tree of branches, and its live tasks."""

    def __init__(self, job_module: str) -> None:
        self.root = Branch(self)
        self.tasks: set[asyncio.Task[Any]] = set()
        """The attempt's tasks that may still run its code."""
        self.stepping: set[asyncio.Task[Any]] = set()
        """Those of them in the middle of a step's function."""
        self.ending = False
        """The attempt is over: a call now raises CancelledError, and a task
        that finishes its step cancels itself."""
        self._own = _package_dirs(job_module)

    def here(self) -> Branch:
        """The branch of the code running now: the root for code outside every
        task of the tree (a synchronous job's thread)."""
        branch = BRANCH.get()
        return branch if branch is not None and branch.tree is self else self.root

    def track(self, task: asyncio.Task[Any]) -> None:
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def enter(self) -> tuple[contextvars.Token[Branch | None], contextvars.Token[bool]]:
        """Make the running task this tree's root branch (``Job.run`` is
        about to run in it); :meth:`leave` with what this returns after.
        (No context manager: a job's error passes through no frame of ours.)"""
        self.root.task = asyncio.current_task()
        return BRANCH.set(self.root), IN_STEP.set(False)

    def leave(
        self, entered: tuple[contextvars.Token[Branch | None], contextvars.Token[bool]]
    ) -> None:
        branch, in_step = entered
        IN_STEP.reset(in_step)
        BRANCH.reset(branch)

    def origin(self, coro: object) -> str:
        """What ``coro`` is: ``"app"`` (a coroutine of the application's),
        ``"call"`` (one of a run's calls), or ``"other"`` (the standard
        library's, another library's, stepstone's own work)."""
        code = getattr(coro, "cr_code", None)
        filename = getattr(code, "co_filename", None)
        if not isinstance(filename, str) or filename.startswith("<"):
            return "other"
        if filename.startswith(_STEPSTONE_DIRS):
            return "call" if getattr(code, "co_qualname", "") in CALLS else "other"
        if filename.startswith(_LIBRARY_DIRS) and not filename.startswith(self._own):
            return "other"
        return "app"


Begun = tuple["asyncio.Task[Any] | None", "contextvars.Token[bool]"]
"""What :func:`step_begins` gives :func:`step_ends`."""


def step_begins(tree: RunTree) -> Begun:
    """A step's function is about to run: what it creates is its own, and an
    attempt that ends meanwhile lets it finish. :func:`step_ends` with what
    this returns, once its result is recorded. (Two calls, not a context
    manager: a step is the hot path.)"""
    task = asyncio.current_task()
    if task is not None:
        tree.stepping.add(task)
    return task, IN_STEP.set(True)


def step_ends(
    tree: RunTree, begun: tuple[asyncio.Task[Any] | None, contextvars.Token[bool]]
) -> None:
    """The step is over; a task whose attempt ended meanwhile cancels itself
    (at its next await)."""
    task, token = begun
    IN_STEP.reset(token)
    if task is not None:
        tree.stepping.discard(task)
        if tree.ending and task is not tree.root.task:
            task.cancel()


async def stop(tree: RunTree, *, at_once: bool) -> None:
    """End every task of the attempt still running, and wait for each: one
    in a step's function finishes the step first, unless ``at_once`` (the
    attempt was stopped from outside: a cancel, a timeout, a lost lease, a
    drain). A task that goes on STOP_GRACE seconds after it was cancelled is
    logged and left. Cancelled meanwhile, it stops the rest at once."""
    tree.ending = True
    me = asyncio.current_task()
    loop = asyncio.get_running_loop()
    cancelled: dict[asyncio.Task[Any], float] = {}
    left: set[asyncio.Task[Any]] = set()
    interrupted: asyncio.CancelledError | None = None
    while True:
        now = loop.time()
        pending = {t for t in tree.tasks if not t.done() and t is not me} - left
        for task in pending:
            if task not in cancelled and (at_once or task not in tree.stepping):
                task.cancel()
                cancelled[task] = now
        stuck = {t for t in pending if t in cancelled and now - cancelled[t] >= STOP_GRACE}
        for task in stuck:
            log.error("a task of an ended attempt ignores its cancellation and goes on: %r", task)
        left |= stuck
        pending -= stuck
        if not pending:
            break
        try:
            await asyncio.wait(pending, timeout=STOP_CHECK, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError as exc:
            interrupted, at_once = exc, True
    if interrupted is not None:
        raise interrupted


# -- the task factory --------------------------------------------------------


def install(loop: asyncio.AbstractEventLoop) -> None:
    """Have ``loop`` give the tasks of runs their branches (see the module
    docstring), on top of whatever task factory it has; done once a loop."""
    current = loop.get_task_factory()
    if getattr(current, "stepstone_branches", False):
        return
    loop.set_task_factory(_factory(current))


def _factory(previous: Any) -> Any:
    def create(
        loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any], **kwargs: Any
    ) -> asyncio.Future[Any]:
        given: contextvars.Context | None = kwargs.get("context")
        parent = BRANCH.get() if given is None else given.run(BRANCH.get)
        if parent is None:  # (most tasks: the worker's, the application's outside runs)
            if previous is None:
                return asyncio.Task(coro, loop=loop, **kwargs)
            made: asyncio.Future[Any] = previous(loop, coro, **kwargs)
            return made
        tree = parent.tree
        in_step = IN_STEP.get() if given is None else given.run(IN_STEP.get)
        origin = "other" if in_step else tree.origin(coro)
        if origin == "other":  # (no part of the run: detached from it)
            return _make(previous, loop, coro, {**kwargs, "context": _with(given, None)})
        if origin == "app" and not _inside_wait_for():
            child = parent.spawn()
            task = _make(previous, loop, coro, {**kwargs, "context": _with(given, child)})
            child.task = task if isinstance(task, asyncio.Task) else None
        else:  # (a call run as a task of its own, or wait_for's: its parent's branch)
            task = _make(previous, loop, coro, kwargs)
        if isinstance(task, asyncio.Task):
            tree.track(task)
        return task

    create.stepstone_branches = True  # type: ignore[attr-defined]
    return create


def _with(given: contextvars.Context | None, branch: Branch | None) -> contextvars.Context:
    """A copy of the creating context (``given``, or the running one) in which
    the new task belongs to ``branch``."""
    context = contextvars.copy_context() if given is None else given.copy()
    context.run(BRANCH.set, branch)
    return context


def _make(
    previous: Any,
    loop: asyncio.AbstractEventLoop,
    coro: Coroutine[Any, Any, Any],
    kwargs: dict[str, Any],
) -> asyncio.Future[Any]:
    if previous is not None:
        made: asyncio.Future[Any] = previous(loop, coro, **kwargs)
        return made
    return asyncio.Task(coro, loop=loop, **kwargs)


if sys.version_info < (3, 12):
    _WAIT_FOR = asyncio.wait_for.__code__

    def _inside_wait_for() -> bool:
        """Whether ``asyncio.wait_for`` is creating the task: before 3.12 it
        runs its awaitable in a task of its own, from 3.12 in its caller's."""
        frame: FrameType | None = sys._getframe(2)
        for _ in range(6):
            if frame is None:
                return False
            if frame.f_code is _WAIT_FOR:
                return True
            frame = frame.f_back
        return False

else:

    def _inside_wait_for() -> bool:
        return False


def _dirs(*paths: str | None) -> tuple[str, ...]:
    found: list[str] = []
    for path in paths:
        if path:
            for form in {path, os.path.realpath(path)}:
                found.append(form.rstrip(os.sep) + os.sep)
    return tuple(found)


@functools.lru_cache(maxsize=256)
def _package_dirs(module: str) -> tuple[str, ...]:
    """The directories of the application package ``module`` belongs to:
    installed like a library, its coroutines are still the application's."""
    top = sys.modules.get(module.partition(".")[0])
    paths = list(getattr(top, "__path__", None) or [])
    file = getattr(top, "__file__", None)
    if not paths and isinstance(file, str) and not file.endswith("__init__.py"):
        return (file, os.path.realpath(file))  # (a module of its own: only that file)
    return _dirs(*paths)


_STEPSTONE_DIRS = _dirs(
    os.path.dirname(os.path.dirname(__file__)),
    *stepstone.runtime.__path__,
    *stepstone.store.__path__,
)
_paths = sysconfig.get_paths()
_LIBRARY_DIRS = _dirs(
    _paths.get("stdlib"),
    _paths.get("platstdlib"),
    _paths.get("purelib"),
    _paths.get("platlib"),
    *site.getsitepackages(),
    site.getusersitepackages(),
)
