"""Decoding through ``thunder.jit``: greedy and sampled token generation with KV caches, HF
``generate()`` on a jitted model, and keyword arguments forwarded as ``nn.Module.__call__`` does.

Tiny random-weight models built from configs (nothing is downloaded); tokens and logits are
compared with eager PyTorch.
"""

from __future__ import annotations

import copy
import functools

import pytest
import torch

import thunder

# ---------------------------------------------------------------- keyword forwarding


def _reads_kwargs(fn):
    """A decorator like transformers' output-capturing wrappers: it reads an argument from **kwargs."""

    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        kwargs["use_cache"] = bool(kwargs.get("use_cache", False))
        return fn(self, *args, **kwargs)

    return wrapper


class _Inner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    @_reads_kwargs
    def forward(self, x, mask=None, use_cache=None, scale=1.0):
        y = self.lin(x) * scale
        return y + 1 if use_cache else y


def test_keywords_reach_forward_as_keywords():
    """Calling a jitted module with keywords passes them on as keywords (not positionally, which made
    decorated forwards fail with "got multiple values for argument 'use_cache'")."""
    torch.manual_seed(0)
    m = _Inner()
    jm = thunder.jit(m)
    x = torch.randn(2, 4)
    for kwargs in ({"use_cache": True}, {"mask": None, "use_cache": False, "scale": 2.0}, {}):
        torch.testing.assert_close(jm(x, **kwargs), m(x, **kwargs))
    torch.testing.assert_close(jm(x, None), m(x, None))
    torch.testing.assert_close(jm(x=x, use_cache=True), m(x=x, use_cache=True))


# ---------------------------------------------------------------- LitGPT KV cache


def _litgpt_llama():
    pytest.importorskip("litgpt", reason="the litgpt package is an optional test dependency")
    from litgpt import GPT, Config

    cfg = Config(
        block_size=64,
        vocab_size=96,
        padded_vocab_size=96,
        n_layer=2,
        n_embd=32,
        n_head=4,
        n_query_groups=2,
        rotary_percentage=1.0,
        parallel_residual=False,
        bias=False,
        norm_class_name="RMSNorm",
        mlp_class_name="LLaMAMLP",
        intermediate_size=64,
    )
    torch.manual_seed(0)
    return GPT(cfg).eval()


def _litgpt_decode(model, prompt, steps: int, *, sample_seed: int | None = None):
    """Prefill, then one token per step through the model's KV cache; greedy unless ``sample_seed``."""
    model.set_kv_cache(batch_size=prompt.shape[0], max_seq_length=32)
    gen = torch.Generator().manual_seed(sample_seed) if sample_seed is not None else None
    tokens, logits_seen = [], []
    x, pos = prompt, torch.arange(prompt.shape[1])
    with torch.no_grad():
        for _ in range(steps):
            logits = model(x, input_pos=pos)[:, -1]
            if gen is None:
                nxt = logits.argmax(-1, keepdim=True)
            else:
                nxt = torch.multinomial(torch.softmax(logits / 0.8, -1), 1, generator=gen)
            tokens.append(nxt)
            logits_seen.append(logits)
            x, pos = nxt, pos[-1:] + 1
    return torch.cat(tokens, 1), torch.stack(logits_seen)


@pytest.mark.parametrize("sample_seed", [None, 3], ids=["greedy", "sampled"])
def test_litgpt_kv_cache_decoding_matches_eager(sample_seed):
    model = _litgpt_llama()
    ref = copy.deepcopy(model)
    prompt = torch.randint(0, 96, (2, 5), generator=torch.Generator().manual_seed(1))
    expected_tokens, expected_logits = _litgpt_decode(ref, prompt, 8, sample_seed=sample_seed)
    jm = thunder.jit(model)
    tokens, logits = _litgpt_decode(jm, prompt, 8, sample_seed=sample_seed)
    torch.testing.assert_close(logits, expected_logits, atol=1e-5, rtol=1e-5)
    assert torch.equal(tokens, expected_tokens)
    # the KV cache is a buffer updated in place: the caches hold the same keys and values
    for (name, buf), ref_buf in zip(model.named_buffers(), ref.buffers()):
        torch.testing.assert_close(buf, ref_buf, msg=name)
    # prefill and one decode step: every later step reuses the decode program
    assert thunder.cache_misses(jm) == 2


# ---------------------------------------------------------------- Hugging Face generate()


def _hf_llama():
    transformers = pytest.importorskip("transformers", reason="transformers is an optional test dependency")
    cfg = transformers.LlamaConfig(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=0,
        eos_token_id=None,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).eval()


def test_generate_on_a_thunder_module_runs_the_jitted_forward():
    model = _hf_llama()
    ref = copy.deepcopy(model)
    ids = torch.randint(3, 96, (1, 6), generator=torch.Generator().manual_seed(1))
    kw = dict(max_new_tokens=5, do_sample=False, use_cache=False)
    expected = ref.generate(ids, attention_mask=torch.ones_like(ids), **kw)
    jm = thunder.jit(model)
    actual = jm.generate(ids, attention_mask=torch.ones_like(ids), **kw)
    assert torch.equal(actual, expected)
    # the first length, then one program with the sequence length symbolic (automatic dynamic sizes)
    assert thunder.cache_misses(jm) == 2
    assert type(model) is type(ref) and "forward" not in model.__dict__  # the model is left as it was


def test_sampled_generate_matches_eager():
    model = _hf_llama()
    ref = copy.deepcopy(model)
    ids = torch.randint(3, 96, (2, 4), generator=torch.Generator().manual_seed(1))
    kw = dict(max_new_tokens=4, do_sample=True, top_k=20, temperature=0.9, use_cache=False)
    torch.manual_seed(7)
    expected = ref.generate(ids, attention_mask=torch.ones_like(ids), **kw)
    jm = thunder.jit(model)
    torch.manual_seed(7)
    actual = jm.generate(ids, attention_mask=torch.ones_like(ids), **kw)
    assert torch.equal(actual, expected)


def _generate_both(model, ids, **kw):
    """``generate`` on an eager copy and on ``thunder.jit(model)``: (eager output, thunder output, jm)."""
    ref = copy.deepcopy(model)
    kw = dict(attention_mask=torch.ones_like(ids), return_dict_in_generate=True, output_logits=True, **kw)
    seed = kw.pop("seed", 0)
    torch.manual_seed(seed)
    expected = ref.generate(ids, **kw)
    jm = thunder.jit(model)
    torch.manual_seed(seed)
    actual = jm.generate(ids, **kw)
    assert torch.equal(actual.sequences, expected.sequences)
    for a, e in zip(actual.logits, expected.logits, strict=True):
        torch.testing.assert_close(a, e, atol=1e-5, rtol=1e-5)
    return jm


@pytest.mark.parametrize("cache", ["dynamic", "static"])
@pytest.mark.parametrize("do_sample", [False, True], ids=["greedy", "sampled"])
def test_generate_with_hf_caches_matches_eager(cache, do_sample):
    """HF generate() with its DynamicCache or StaticCache: the cache's tensors are program inputs and
    its updates are written back; tokens and logits equal eager's."""
    model = _hf_llama()
    ids = torch.randint(3, 96, (2, 5), generator=torch.Generator().manual_seed(1))
    kw = dict(max_new_tokens=6, do_sample=do_sample, cache_implementation=cache)
    if do_sample:
        kw.update(top_k=20, temperature=0.9, seed=5)
    jm = _generate_both(model, ids, **kw)
    # the static cache keeps its shape: a prefill program and one decode program; the dynamic cache grows:
    # prefill, the first decode step, then one program whose cache length is symbolic
    assert thunder.cache_misses(jm) == (2 if cache == "static" else 3)


def test_manual_decode_loop_with_static_cache():
    transformers = pytest.importorskip("transformers")
    model = _hf_llama()
    ref = copy.deepcopy(model)
    ids = torch.randint(3, 96, (1, 6), generator=torch.Generator().manual_seed(2))

    def decode(m, steps=6):
        cache = transformers.StaticCache(config=model.config, max_cache_len=16)
        x, pos, tokens, logits_seen = ids, torch.arange(ids.shape[1]), [], []
        with torch.no_grad():
            for _ in range(steps):
                logits = m(input_ids=x, past_key_values=cache, cache_position=pos, use_cache=True).logits[:, -1]
                x = logits.argmax(-1, keepdim=True)
                tokens.append(x)
                logits_seen.append(logits)
                pos = pos[-1:] + 1
        return torch.cat(tokens, 1), torch.stack(logits_seen)

    expected = decode(ref)
    jm = thunder.jit(model)
    actual = decode(jm)
    assert torch.equal(actual[0], expected[0])
    torch.testing.assert_close(actual[1], expected[1], atol=1e-5, rtol=1e-5)
    assert thunder.cache_misses(jm) == 2
    # the decode step writes one position of each cache tensor in place, not a copy of the whole cache
    calls = [c.strip() for c in str(thunder.last_traces(jm)[-1]).splitlines() if not c.lstrip().startswith("#")]
    assert sum("= Tensor.index_copy_(past_key_values_" in c for c in calls) == 2 * model.config.num_hidden_layers
    assert not [c for c in calls if c.startswith("copy_(")]


def test_generate_with_a_jitted_submodule_forwards_keywords():
    """Swapping a jitted inner model into generate(): the outer forward calls it with keywords
    (this failed with "got multiple values for argument 'use_cache'")."""
    model = _hf_llama()
    ref = copy.deepcopy(model)
    ids = torch.randint(3, 96, (1, 6), generator=torch.Generator().manual_seed(1))
    kw = dict(max_new_tokens=4, do_sample=False, attention_mask=torch.ones_like(ids))
    expected = ref.generate(ids, **kw)
    model.model = thunder.jit(model.model)
    actual = model.generate(ids, **kw)
    assert torch.equal(actual, expected)
    # prefill, first step, then the cache length symbolic
    assert thunder.cache_misses(model.model) == 3
