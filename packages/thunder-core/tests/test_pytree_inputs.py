"""Tensors inside Python objects (dataclasses, user classes, HF caches, ModelOutput) are program inputs
and outputs, through one pytree library (thunder.core.pytree, on optree)."""

from __future__ import annotations

import dataclasses
import warnings
from typing import NamedTuple

import pytest
import torch

import thunder
from thunder.core import pytree


@dataclasses.dataclass
class Batch:
    x: torch.Tensor
    scale: float


def _scaled(b: Batch):
    return b.x * b.scale


def test_dataclass_argument_tensors_are_inputs_not_constants():
    jf = thunder.jit(_scaled)
    b1, b2 = Batch(torch.randn(3), 2.0), Batch(torch.randn(3), 2.0)
    torch.testing.assert_close(jf(b1), _scaled(b1))
    torch.testing.assert_close(jf(b2), _scaled(b2))  # new tensor, same program
    assert thunder.cache_misses(jf) == 1
    b3 = Batch(torch.randn(3), -1.0)  # a Python value inside the object is checked
    torch.testing.assert_close(jf(b3), _scaled(b3))
    assert thunder.cache_misses(jf) == 2


@dataclasses.dataclass(frozen=True, slots=True)
class _SlottedBatch:
    x: torch.Tensor
    scale: float


def test_slotted_frozen_dataclass_argument():
    # a frozen dataclass with __slots__ has no __dict__ (torch's op_db passes such option objects)
    def f(b):
        return b.x * b.scale

    jf = thunder.jit(f)
    for scale in (2.0, 2.0, -1.0):
        b = _SlottedBatch(torch.randn(3), scale)
        torch.testing.assert_close(jf(b), f(b))
    assert thunder.cache_misses(jf) == 2


class _Cache:
    def __init__(self):
        self.keys = torch.zeros(1, 2)
        self.steps = 0

    def update(self, v):
        self.keys = torch.cat([self.keys, v])
        self.steps += 1
        return self.keys


def _step(cache, v):
    return cache.update(v).sum(0)


def test_object_argument_updates_reach_the_callers_object():
    jf = thunder.jit(_step)
    mine, ref = _Cache(), _Cache()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(3):
            v = torch.randn(1, 2)
            torch.testing.assert_close(jf(mine, v), _step(ref, v))
            torch.testing.assert_close(mine.keys, ref.keys)
            assert mine.steps == ref.steps


def _returns_cache(cache, v):
    cache.update(v)
    return cache


def test_returned_argument_object_is_the_callers_object():
    jf = thunder.jit(_returns_cache)
    cache = _Cache()
    out = jf(cache, torch.ones(1, 2))
    assert out is cache
    torch.testing.assert_close(cache.keys, torch.tensor([[0.0, 0.0], [1.0, 1.0]]))


@dataclasses.dataclass
class Out:
    y: torch.Tensor
    n: int


def test_dataclass_output():
    jf = thunder.jit(lambda x: Out(x * 2, 3))
    x = torch.randn(2)
    out = jf(x)
    assert type(out) is Out and out.n == 3
    torch.testing.assert_close(out.y, x * 2)


def test_structseq_and_namedtuple_outputs():
    jf = thunder.jit(lambda x: torch.max(x, 0))
    x = torch.randn(3, 4)
    out, ref = jf(x), torch.max(x, 0)
    assert type(out) is type(ref)
    torch.testing.assert_close(out.values, ref.values)
    torch.testing.assert_close(out.indices, ref.indices)


def test_pytree_keeps_insertion_order_and_slices():
    leaves, spec = pytree.tree_flatten({"b": 1, "a": (slice(2, 3), None)})
    assert leaves == [1, 2, 3, None, None]
    assert pytree.tree_unflatten(spec, leaves) == {"b": 1, "a": (slice(2, 3), None)}
    assert pytree.tree_leaves(torch.Size([2, 3])) == [torch.Size([2, 3])]


def test_hf_dynamic_cache_decoding_matches_eager():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    model = transformers.LlamaForCausalLM(cfg).eval()
    jm = thunder.jit(model)
    ids = torch.randint(0, 64, (1, 5))
    with torch.no_grad():
        cache_e, cache_t = transformers.DynamicCache(config=cfg), transformers.DynamicCache(config=cfg)
        out_e = model(ids, past_key_values=cache_e, use_cache=True)
        out_t = jm(ids, past_key_values=cache_t, use_cache=True)
        assert out_t.past_key_values is cache_t
        for _ in range(3):
            torch.testing.assert_close(out_t.logits, out_e.logits)
            assert cache_t.get_seq_length() == cache_e.get_seq_length()
            token = out_e.logits[:, -1:].argmax(-1)
            out_e = model(token, past_key_values=cache_e, use_cache=True)
            out_t = jm(token, past_key_values=cache_t, use_cache=True)
        torch.testing.assert_close(out_t.logits, out_e.logits)
        for layer_t, layer_e in zip(cache_t.layers, cache_e.layers):
            torch.testing.assert_close(layer_t.keys, layer_e.keys)
            torch.testing.assert_close(layer_t.values, layer_e.values)


def test_model_output_argument_and_output():
    modeling_outputs = pytest.importorskip("transformers.modeling_outputs")
    BaseModelOutput = modeling_outputs.BaseModelOutput

    def f(o):
        return BaseModelOutput(last_hidden_state=o.last_hidden_state * 2, hidden_states=(o["last_hidden_state"],))

    jf = thunder.jit(f)
    for _ in range(2):
        o = BaseModelOutput(last_hidden_state=torch.randn(2, 3))
        out, ref = jf(o), f(o)
        assert type(out) is BaseModelOutput and list(out.keys()) == list(ref.keys())
        torch.testing.assert_close(out.last_hidden_state, ref.last_hidden_state)
        torch.testing.assert_close(out.hidden_states, ref.hidden_states)
    assert thunder.cache_misses(jf) == 1


def _appends(acc, options, x):
    acc.append(x * 2)
    options["shifted"] = x + 1
    return x.sum()


def test_list_and_dict_arguments_changed_in_place_as_in_eager():
    jf = thunder.jit(_appends)
    for _ in range(3):
        x = torch.randn(3)
        mine_acc, mine_opts = [], {"keep": 1}
        ref_acc, ref_opts = [], {"keep": 1}
        torch.testing.assert_close(jf(mine_acc, mine_opts, x), _appends(ref_acc, ref_opts, x))
        assert len(mine_acc) == 1 and list(mine_opts) == list(ref_opts)
        torch.testing.assert_close(mine_acc[0], ref_acc[0])
        torch.testing.assert_close(mine_opts["shifted"], ref_opts["shifted"])
    assert thunder.cache_misses(jf) == 1


class _Pair(NamedTuple):
    a: torch.Tensor
    b: torch.Tensor


# torch operators that take a sequence of tensors, given a named tuple built inside the program: the
# printed program used to hold the named tuple as a constant of stand-ins (or rebuild it from a generator)
_SEQUENCE_OPS = {
    "cat": lambda a, b: torch.cat(_Pair(a, b)) * 2,
    "stack": lambda a, b: torch.stack(_Pair(a, b), 1) * 2,
    "meshgrid": lambda a, b: torch.mul(*torch.meshgrid(_Pair(a, b), indexing="ij")),
    "atleast_2d": lambda a, b: torch.stack(torch.atleast_2d(_Pair(a, b))) * 2,
    "column_stack": lambda a, b: torch.column_stack(_Pair(a, b)) * 2,
    "einsum": lambda a, b: torch.einsum("i,j->ij", _Pair(a, b)) * 2,
    "argument": lambda p: torch.cat(p) * 2,
}


@pytest.mark.parametrize("name", sorted(_SEQUENCE_OPS))
def test_named_tuple_as_an_operators_sequence_argument(name):
    fn = _SEQUENCE_OPS[name]
    leaves = [torch.randn(3, dtype=torch.float64, requires_grad=True) for _ in range(2)]
    args = (_Pair(*leaves),) if name == "argument" else tuple(leaves)
    expected = fn(*args)
    actual = thunder.jit(fn)(*args)
    torch.testing.assert_close(actual, expected)
    weights = torch.randn_like(expected)
    torch.testing.assert_close(
        torch.autograd.grad((actual * weights).sum(), leaves), torch.autograd.grad((expected * weights).sum(), leaves)
    )
