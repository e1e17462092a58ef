"""Seeding and the global random state inside the traced function: recorded, run on every call.

``torch.manual_seed``, ``torch.get_rng_state``/``set_rng_state`` (and their ``torch.random`` and
``torch.cuda`` spellings) and ``torch.random.fork_rng`` are plain Python functions, not torch
functions the tracing mode sees: run while tracing, they would change the generator once, at
compile time, and later calls would draw from the caller's state. While tracing they are
replaced by functions that record ``prims.rng_seed``/``rng_get_state``/``rng_set_state`` into
the program, at their place between its random draws.
"""

from __future__ import annotations

import contextlib
import threading

import torch

from thunder.core import prims

__all__ = ["patched_rng"]


def _record(sym, *args):
    from thunder.tracing.tracer import _current_tracer

    return _current_tracer[-1].symbol_called(sym, args, {})


def _manual_seed(seed):
    _record(prims.rng_seed, int(seed))
    return torch.default_generator  # what torch.manual_seed returns


def _get_rng_state():
    return _record(prims.rng_get_state, "cpu")


def _set_rng_state(new_state):
    _record(prims.rng_set_state, new_state, "cpu")


def _cuda_device(device) -> str:
    if isinstance(device, int):
        return f"cuda:{device}"
    d = torch.device(device)
    return f"cuda:{d.index if d.index is not None else torch.cuda.current_device()}"


def _cuda_get_rng_state(device="cuda"):
    return _record(prims.rng_get_state, _cuda_device(device))


def _cuda_set_rng_state(new_state, device="cuda"):
    _record(prims.rng_set_state, new_state, _cuda_device(device))


@contextlib.contextmanager
def _fork_rng(devices=None, enabled=True, _caller="fork_rng", _devices_kw="devices", device_type="cuda"):
    if not enabled:
        yield
        return
    if device_type != "cuda":
        raise NotImplementedError(
            f"thunder.jit traces torch.random.fork_rng for the CPU and CUDA generators, not device_type={device_type!r}"
        )
    if devices is None:
        devices = range(torch.cuda.device_count()) if torch.cuda.is_available() else ()
    devices = [_cuda_device(d) for d in devices]
    cpu_state = _record(prims.rng_get_state, "cpu")
    device_states = [(_record(prims.rng_get_state, d), d) for d in devices]
    try:
        yield
    finally:
        _record(prims.rng_set_state, cpu_state, "cpu")
        for state, d in device_states:
            _record(prims.rng_set_state, state, d)


_REPLACED = (
    (torch, "manual_seed", _manual_seed),
    (torch.random, "manual_seed", _manual_seed),
    (torch, "get_rng_state", _get_rng_state),
    (torch.random, "get_rng_state", _get_rng_state),
    (torch, "set_rng_state", _set_rng_state),
    (torch.random, "set_rng_state", _set_rng_state),
    (torch.random, "fork_rng", _fork_rng),
    (torch.cuda, "get_rng_state", _cuda_get_rng_state),
    (torch.cuda, "set_rng_state", _cuda_set_rng_state),
)


def _for_tracing_thread(replacement, original, thread: int):
    def call(*args, **kwargs):
        if threading.get_ident() != thread:  # eager code in another thread while this one traces
            return original(*args, **kwargs)
        return replacement(*args, **kwargs)

    call.__wrapped__ = original
    return call


class patched_rng:
    """While tracing (in this thread): the functions above record into the program (re-entrant)."""

    _depth = [0]
    _saved: list = []

    def __enter__(self):
        if self._depth[0] == 0:
            thread = threading.get_ident()
            patched_rng._saved = [(module, name, getattr(module, name)) for module, name, _ in _REPLACED]
            for (module, name, replacement), (_, _, original) in zip(_REPLACED, patched_rng._saved):
                setattr(module, name, _for_tracing_thread(replacement, original, thread))
        self._depth[0] += 1
        return self

    def __exit__(self, *exc):
        self._depth[0] -= 1
        if self._depth[0] == 0:
            for module, name, original in patched_rng._saved:
                setattr(module, name, original)
        return False
