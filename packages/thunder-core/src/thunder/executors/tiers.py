"""Tiered compilation: a new program runs unfused at once, its fusion compiles in the background.

A fusion executor that compiles slowly (``FusionExecutor.compiles_slowly``: Inductor on CPU; nvFuser or
Triton on a GPU) would make a program's first call wait seconds for its regions. With
``thunder.jit(..., fusion="background")`` (the default when such an executor is in the list) a new cache
entry first runs its *unfused* program (the same trace, claimed without the slow executors) while a
:class:`FusionJob` builds the *fused* program and compiles its regions on one background thread the
process shares. Each slow region is called once with example inputs made from its metadata: zeros of the
region's shapes and dtypes (compiling needs metadata, not values). When every region has compiled, the
entry's program is replaced by the fused one in a single assignment, so a caller on another thread runs
one program or the other, never a mixture; a call already running (and its backward) keeps the program it
started with. If building the fused program fails, the unfused program stays and thunder warns once per
jitted function. A region whose example call raises (the example values may be what failed: zeros where
a region reads a saved RNG state) compiles at its first real call instead, as under ``fusion="off"``.

Compiling a region holds the compile lock that tracing holds (Dynamo and Thunder's tracer both set
process-wide state, such as ``torch.compiler.is_compiling()``): a new program traced meanwhile waits for
the region being compiled, not for the whole job. The lock is a :class:`CompileLock`: between two regions
the worker lets every thread waiting to trace go first (a plain lock lets the thread that releases it take
it again at once, and a new program waited for the whole job: seconds).

A job waits to be *released* before the worker builds anything, so that the call which compiled the program
runs without the worker competing for the GIL and the cores (the first call then costs what an unfused
``thunder.jit`` call costs): thunder releases it when that call returns, or, when the call's outputs will be
differentiated, once the backward of that call has run, at the latest ``hold_until``'s deadline after the call
(a forward whose backward never comes). ``thunder.wait_for_fusion`` releases the jobs it waits for.

While the worker compiles, the interpreter's thread switch interval (``sys.setswitchinterval``) is lowered
to ``WORKER_SWITCH_INTERVAL_S``, and restored when the queue is empty. Compiling is seconds of pure Python
(Dynamo, Inductor) that holds the GIL; every PyTorch kernel the user's thread runs meanwhile releases the GIL
and must wait for the worker to give it back, by default up to 5 ms each time: a step of hundreds of kernels
then takes seconds. With the lower interval the user's thread waits a tenth of that.

The worker thread starts when a job is queued and ends when the queue is empty, so no thread outlives the
work. It is a daemon thread: a process that exits with jobs pending does not wait for them. At exit the
worker gets a short grace period to stop between two steps of its job, since a thread left inside native
code while the interpreter finalises can abort the process; a region compile still running then is not
waited for.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

from thunder.core import devices, dtypes
from thunder.core.proxies import NumberProxy, Proxy, TensorProxy
from thunder.core.symbolic import SizeProxy, hints

__all__ = [
    "CompileLock",
    "FusionJob",
    "FUSION_MODES",
    "compile_lock",
    "submit",
    "submit_compile",
    "wait_for_compiles",
    "in_background",
    "when_idle",
    "when_submitted",
    "region_calls",
    "example_inputs",
    "wait_until_idle",
]

FUSION_MODES = ("background", "wait", "off")

# what a cache entry's ``fusion`` says
NOT_TIERED = "not tiered"  # no slow fusion executor, or fusion="off": one program from the start
UNFUSED = "unfused"  # the unfused program runs; its fused version is being compiled
FUSED = "fused"  # the fused program has been swapped in
FAILED = "failed"  # compiling the fused program failed: the unfused program stays


class CompileLock:
    """The process's compile lock, reentrant. Tracing takes it with ``with lock:``; the background worker
    with ``with lock.background():``, which waits until no thread is waiting in ``with lock:``, so a
    program traced while a job compiles waits for one region at most."""

    def __init__(self):
        self._lock = threading.Lock()
        self._owner: int | None = None  # the thread holding it, and how many times
        self._depth = 0
        self._waiting = 0  # threads waiting in ``__enter__``
        self._nobody_waiting = threading.Condition()

    def _acquire(self) -> None:
        """Takes the lock, or holds it once more if this thread holds it already."""
        if self._owner == threading.get_ident():
            self._depth += 1
            return
        self._lock.acquire()
        self._owner, self._depth = threading.get_ident(), 1

    def _release(self) -> None:
        self._depth -= 1
        if not self._depth:
            self._owner = None
            self._lock.release()

    def __enter__(self) -> CompileLock:
        if self._owner == threading.get_ident():
            self._acquire()
            return self
        with self._nobody_waiting:
            self._waiting += 1
        try:
            self._acquire()
        finally:
            with self._nobody_waiting:
                self._waiting -= 1
                if not self._waiting:
                    self._nobody_waiting.notify_all()
        return self

    def __exit__(self, *exc) -> None:
        self._release()

    @contextlib.contextmanager
    def background(self):
        """Holds the lock once no thread is waiting to trace (the worker's way in; a thread that holds the lock
        already, as a ``fusion="wait"`` compile does, just holds it once more)."""
        if self._owner == threading.get_ident():
            self._acquire()
        else:
            while True:
                with self._nobody_waiting:
                    self._nobody_waiting.wait_for(lambda: not self._waiting)
                self._acquire()
                if not self._waiting:
                    break
                self._release()  # a tracer came in between: it goes first
        try:
            yield
        finally:
            self._release()


# the process's compile lock: tracing holds it, and the worker holds it while it builds and compiles
compile_lock = CompileLock()


class FusionJob:
    """Builds a program's fused tier, compiles its slow regions and installs it.

    Args:
        build: makes the fused program (called on the worker thread); returns what ``install`` takes.
        regions: given that program, the ``(fn, args)`` calls that compile its slow regions.
        install: swaps the fused program in.
        fail: called with the exception when building or compiling failed.
        lock: the :class:`CompileLock` tracing holds; held (``lock.background()``) while building and while
            each region compiles.
    """

    def __init__(
        self,
        build: Callable[[], Any],
        regions: Callable[[Any], list[tuple[Callable, list]]],
        install: Callable[[Any], None],
        fail: Callable[[BaseException], None],
        lock,
    ):
        self._build, self._regions, self._install, self._fail, self._lock = build, regions, install, fail, lock
        self.done = threading.Event()
        self.released = threading.Event()  # set: the worker may start this job (see the module docstring)
        self._deadline: float | None = None  # (time.monotonic()) when a job not released yet starts anyway
        self.seconds: float | None = None
        self.uncompiled_regions = 0  # regions whose example call raised: they compile when they first run
        self.done_callbacks: list[Callable[[], None]] = []

    def release(self) -> None:
        """Lets the worker start this job now."""
        self.released.set()

    def hold_until(self, deadline: float) -> None:
        """Lets the worker start this job at ``deadline`` (``time.monotonic()``) if it is not released before."""
        self._deadline = deadline

    def _wait_for_release(self) -> None:
        # (polls: the deadline is set after the job was queued, by the thread that runs the first call)
        while not self.released.wait(_RELEASE_POLL_S) and not _shutting_down:
            if self._deadline is not None and time.monotonic() >= self._deadline:
                return

    def run(self) -> None:
        """Builds, compiles and installs the fused program (or reports the failure) once released; sets ``done``."""
        self._wait_for_release()
        start = time.perf_counter()
        try:
            if _shutting_down:
                return
            _lower_switch_interval()
            with self._lock.background():
                program = self._build()
            calls = self._regions(program)
            for fn, args in calls if in_background() else ():
                # a region that can have its compile done out of process first (``prepare_compile``) does it now, the
                # compile lock not held: this thread only waits, tracers go on, and the compile below is quick (under
                # fusion="wait" the caller waits anyway: it compiles at once)
                prepare = getattr(fn, "prepare_compile", None)
                if prepare is not None and not _shutting_down:
                    prepare(*args)
            for fn, args in calls:
                if _shutting_down:
                    return
                with _dynamo_compile_lock(), self._lock.background(), torch.no_grad():
                    try:
                        fn(*args)
                    except Exception:  # noqa: BLE001 - see below
                        # the example values may be what failed (zeros where the region reads an RNG state, say):
                        # the region then compiles at its first real call, as under fusion="off"
                        self.uncompiled_regions += 1
            if not _shutting_down:
                self._install(program)
        except Exception as e:  # noqa: BLE001 - reported to the user by ``fail`` (a warning), the unfused program stays
            self._fail(e)
        finally:
            self.seconds = time.perf_counter() - start
            self.done.set()
            for callback in self.done_callbacks:
                callback()


# the thread switch interval while the worker compiles (see the module docstring); Python's default is 5 ms
WORKER_SWITCH_INTERVAL_S = 0.0005
# how often a job waiting to be released checks its deadline
_RELEASE_POLL_S = 0.05

_queue: collections.deque[FusionJob] = collections.deque()
_queue_lock = threading.Lock()
_worker: threading.Thread | None = None
_shutting_down = False
_switch_intervals: tuple[float, float] | None = None  # (the user's, the worker's) while the worker runs
_current: list[FusionJob | None] = [None]  # the job the worker is running or waiting to be released
_compiles: set[FusionJob] = set()  # submit_compile's jobs not done yet
_idle_callbacks: list[Callable[[], None]] = []
_submit_callbacks: list[Callable[[], None]] = []


def _dynamo_compile_lock():
    """Dynamo's compile lock when Dynamo is loaded (else nothing to hold): a region compile shares process-wide
    state with a ``torch.compile`` compiling in another thread (which failed in Dynamo's guard building when they
    ran together). Taken before thunder's lock, the order a Dynamo compile calling thunder (ThunderFX) takes them."""
    convert_frame = sys.modules.get("torch._dynamo.convert_frame")
    lock = getattr(convert_frame, "compile_lock", None)
    return lock if lock is not None else contextlib.nullcontext()


def submit(job: FusionJob) -> None:
    """Queues ``job`` for the background worker (started if it is not running). The worker starts it once it is
    released (``FusionJob.release``, ``FusionJob.hold_until``)."""
    global _worker
    _run_callbacks(_submit_callbacks)
    with _queue_lock:
        _queue.append(job)
        if _worker is None or not _worker.is_alive():
            _worker = threading.Thread(target=_work, name="thunder-background-fusion", daemon=True)
            _worker.start()


class _OneCompile:
    def __init__(self, compile_one: Callable[[], Any], prepare: Callable[[], Any] | None):
        self._compile_one = compile_one
        if prepare is not None:
            self.prepare_compile = prepare

    def __call__(self) -> None:
        self._compile_one()


def submit_compile(compile_one: Callable[[], Any], prepare: Callable[[], Any] | None = None) -> FusionJob:
    """Queues one more compile for the worker, released at once: ``prepare()`` runs first without the compile lock
    (see ``FusionJob.run``), then ``compile_one()`` holding it (a fused region learning a new input layout compiles
    its graph for it this way). Their exceptions are dropped: the caller keeps what it ran before."""
    one = _OneCompile(compile_one, prepare)
    job = FusionJob(lambda: None, lambda _: [(one, [])], lambda _: None, lambda _: None, compile_lock)
    with _queue_lock:
        _compiles.add(job)
    job.done_callbacks.append(lambda: _compiles.discard(job))
    job.release()
    submit(job)
    return job


def wait_for_compiles(deadline: float | None = None) -> bool:
    """Waits for the compiles queued with :func:`submit_compile` (``deadline``: ``time.monotonic()``, None: no
    limit); False if the deadline passed first."""
    while True:
        with _queue_lock:
            pending = next(iter(_compiles), None)
        if pending is None:
            return True
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not pending.done.wait(remaining):
            return False
        with _queue_lock:
            _compiles.discard(pending)  # (its done callback does it too, but may not have run yet)


def wait_until_idle(timeout: float | None = None) -> bool:
    """Waits until the background worker has no job left, whoever queued it (False if ``timeout`` seconds passed
    first). Tests that count the process's compiles call it first, so that another program's work does not end
    among theirs."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        with _queue_lock:
            worker = _worker
        if worker is None or worker is threading.current_thread():
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False
        worker.join(0.05)


def in_background() -> bool:
    """Whether the calling thread is the background worker."""
    return threading.current_thread() is _worker


def when_submitted(callback: Callable[[], None]) -> None:
    """Calls ``callback()`` each time a job is queued (a fusion executor's compile subprocess starts then)."""
    _submit_callbacks.append(callback)


def when_idle(callback: Callable[[], None]) -> None:
    """Calls ``callback()`` each time the worker ends because its queue is empty, and at exit (a fusion
    executor's compile subprocess ends then)."""
    _idle_callbacks.append(callback)


def _run_callbacks(callbacks: list[Callable[[], None]]) -> None:
    for callback in list(callbacks):
        try:
            callback()
        except Exception:  # noqa: BLE001, S110 - cleanup: nothing the caller could do
            pass


def _lower_switch_interval() -> None:
    """Lowers the switch interval while the worker works (restored when it ends); see the module docstring."""
    global _switch_intervals
    with _queue_lock:
        if _switch_intervals is None:  # (the user's interval, and ours)
            user = sys.getswitchinterval()
            _switch_intervals = (user, min(user, WORKER_SWITCH_INTERVAL_S))
            sys.setswitchinterval(_switch_intervals[1])


def _work() -> None:
    global _worker, _switch_intervals
    while True:
        with _queue_lock:
            if not _queue or _shutting_down:
                _worker = None
                for job in _queue:  # (exiting: pending jobs are dropped, their waiters released)
                    job.done.set()
                _queue.clear()
                if _switch_intervals is not None:
                    user, ours = _switch_intervals
                    if sys.getswitchinterval() == ours:  # (unless someone else has set it meanwhile)
                        sys.setswitchinterval(user)
                    _switch_intervals = None
                break
            job = _queue.popleft()
            _current[0] = job
        job.run()
        _current[0] = None
    _run_callbacks(_idle_callbacks)


# at exit, how long to let the worker reach a point where it stops (between the steps of a job): a thread
# still inside native code when the interpreter finalises can take the process down with it
_EXIT_GRACE_S = 2.0


def _shut_down() -> None:
    global _shutting_down
    _shutting_down = True
    job = _current[0]
    if job is not None:  # (a job waiting to be released stops waiting)
        job.release()
    worker = _worker
    if worker is not None and worker is not threading.current_thread():
        worker.join(_EXIT_GRACE_S)
    _run_callbacks(_idle_callbacks)


atexit.register(_shut_down)


def region_calls(trace, is_slow: Callable[[Any], bool]) -> list[tuple[Callable, list]]:
    """``(fn, example args)`` for each region of ``trace`` that a slow executor fused (``is_slow(executor)``)."""
    calls = []
    for bsym in trace.bound_symbols:
        ex = bsym.sym.executor
        if ex is not None and "fusion" in bsym.sym.tags and is_slow(ex):
            calls.append((bsym.sym.call_ctx[bsym.sym.name], example_inputs(bsym.args)))
    return calls


def example_inputs(proxies) -> list:
    """Contiguous zeros with the proxies' sizes (symbolic ones as they were in the traced call) and dtypes, that
    require no grad; numbers as they are. (A slow fusion executor's region compiled from these serves calls
    with other strides and grad flags: ``torch_compile``'s regions make their inputs contiguous and detached.)"""
    out = []
    for p in proxies:
        if isinstance(p, TensorProxy):
            dtype = dtypes.to_torch_dtype(p.dtype)
            out.append(torch.zeros(hints(p.shape), dtype=dtype, device=devices.to_torch_device(p.device)))
        elif isinstance(p, (NumberProxy, SizeProxy)):
            out.append(p.value)
        elif isinstance(p, Proxy):
            raise TypeError(f"no example value for the region input {p.name} ({type(p).__name__})")
        else:
            out.append(p)
    return out
