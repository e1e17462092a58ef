"""The aliasing and mutation record of a compiled program: one frozen summary, built once when the program
is traced, of what it aliases and what it writes.

It plays the part of PyTorch AOTAutograd's ``ViewAndMutationMeta``: the passes after tracing (the
forward/backward split, ``thunder.examine``) and the user (``thunder.last_aliasing``, the header printed with
the computation trace) read it instead of rediscovering the program's writes from its ``copy_`` symbols.

Every name is a name of the computation trace (``a0``, ``t17``); ``caller`` is how the prologue reads the
caller's tensor (``x``, ``args[1]``, a module buffer's path).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["AliasingRecord", "InputUpdate", "SharedStorage"]


@dataclass(frozen=True)
class SharedStorage:
    """Inputs the caller passed as views of one storage: the program reads them all as views of ``storage``
    (an input of its own), so an update through one reaches the others, as in eager."""

    storage: str
    inputs: tuple[str, ...]


@dataclass(frozen=True)
class InputUpdate:
    """One input (or a tensor constant the program reads) that the program updates in place.

    ``new_value``: the value the program writes back into it at its end, in place (its elements); None when
    only its layout changes.
    ``keeps_history``: the input has autograd history and the update was made where autograd does not see it
    (``no_grad``, ``.data``, a detached alias): the caller's tensor keeps that history, as in eager.
    ``layout``: how the step after the call changes the caller's tensor's sizes, strides or storage
    (``"restride"``, ``"storage of <input>"``, ``"tensor"``: it becomes a tensor the program returns), or None.
    """

    input: str
    caller: str
    new_value: str | None
    keeps_history: bool = False
    layout: str | None = None
    constant: bool = False


@dataclass(frozen=True)
class AliasingRecord:
    """What a compiled program aliases and writes (see the module docstring).

    ``shared_storage``: groups of inputs viewing one storage. ``updates``: the inputs updated in place, in the
    order the program writes them back. ``returned_inputs``: the callers' tensors the program returns
    themselves (eager returns the very tensor: ``return x.add_(1)``). ``outputs_aliasing_inputs``: each output
    the executors may compute as a view of inputs, with those inputs (an output a write-back would reach is a
    copy taken before the write, so it is not listed). ``returned_views``: each output returned as a view of
    a caller's tensor the program updates in place (``y.add_(1); return y.t()``) or that shares its storage with
    another argument, with how the prologue reads that tensor: after the write-back, the step after the call
    views the caller's storage where eager's output does, so a write through either reaches the other.
    ``views_of_results``: each output eager returns as a view of a tensor the program computes (``y = x * 2;
    return y.t()``), with that tensor: the program returns it too, and the step after the call views it where
    eager's output does (so the output has a ``_base``, and in-place updates of it after the call work with grad).
    ``unseen_by_version_counter``: ``(former value, new value)`` of each update eager's version counter does not see
    (made through ``.data``): a tensor eager saved for backward before it shares the storage and is not refused,
    so the backward reads the new value where the forward saved the former one.
    """

    shared_storage: tuple[SharedStorage, ...] = ()
    updates: tuple[InputUpdate, ...] = ()
    returned_inputs: tuple[str, ...] = ()
    outputs_aliasing_inputs: tuple[tuple[str, tuple[str, ...]], ...] = ()
    returned_views: tuple[tuple[str, str], ...] = ()
    views_of_results: tuple[tuple[str, str], ...] = ()
    unseen_by_version_counter: tuple[tuple[str, str], ...] = ()

    def __bool__(self) -> bool:
        return bool(
            self.shared_storage
            or self.updates
            or self.returned_inputs
            or self.outputs_aliasing_inputs
            or self.returned_views
            or self.views_of_results
            or self.unseen_by_version_counter
        )

    def updated(self, name: str) -> InputUpdate | None:
        """The update of the input named ``name``, if the program updates it."""
        for u in self.updates:
            if u.input == name:
                return u
        return None

    def comment_lines(self) -> list[str]:
        """The record as ``#`` comment lines: the header printed above the computation trace."""
        if not self:
            return []
        lines = ["# Aliasing and mutation:"]
        for s in self.shared_storage:
            lines.append(f"#   inputs {', '.join(s.inputs)} are views of one storage ({s.storage})")
        for i, u in enumerate(self.updates, 1):
            what = "constant" if u.constant else "input"
            notes = []
            if u.keeps_history:
                notes.append("not seen by autograd: keeps its history")
            if u.layout is not None:
                notes.append(f"then its layout changes: {u.layout}")
            note = f" ({'; '.join(notes)})" if notes else ""
            gets = f"gets {u.new_value}" if u.new_value is not None else "keeps its elements"
            caller = f" ({u.caller})" if u.caller != u.input else ""
            lines.append(f"#   update {i}: {what} {u.input}{caller} {gets}{note}")
        if self.returned_inputs:
            lines.append(f"#   returns the caller's own tensors: {', '.join(self.returned_inputs)}")
        for out, caller in self.returned_views:
            lines.append(f"#   output {out} is returned as a view of the caller's {caller}")
        for out, base in self.views_of_results:
            lines.append(f"#   output {out} is returned as a view of the program's {base}")
        for out, ins in self.outputs_aliasing_inputs:
            lines.append(f"#   output {out} may be a view of {', '.join(ins)}")
        for former, new in self.unseen_by_version_counter:
            lines.append(f"#   {former} becomes {new} through .data: the backward reads {new} where it saved {former}")
        return lines

    def __str__(self) -> str:
        return "\n".join(self.comment_lines()) or "# Aliasing and mutation: none"
