"""Whole models, forward only (no grad, frozen parameters, eval mode), against eager PyTorch."""

from __future__ import annotations

import os

import pytest
import torch

import thunder

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _freeze(model: torch.nn.Module) -> torch.nn.Module:
    for p in model.parameters():
        p.requires_grad_(False)
    return model.eval()


@pytest.fixture
def litgpt_llama():
    from thunder.tests.litgpt_model import GPT, Config

    torch.manual_seed(0)
    model = _freeze(GPT(Config.from_name("llama-tiny")))
    tokens = torch.randint(0, model.config.vocab_size, (2, 64))
    return model, tokens


@pytest.fixture
def hf_llama():
    transformers = pytest.importorskip("transformers")

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=128,
        intermediate_size=128,
        max_position_embeddings=128,
    )
    model = _freeze(transformers.LlamaForCausalLM(config))
    tokens = torch.randint(0, config.vocab_size, (2, 16))
    return model, tokens


def test_litgpt_llama_matches_eager(litgpt_llama):
    model, tokens = litgpt_llama
    tm = thunder.jit(model)
    with torch.no_grad():
        actual = tm(tokens)
        expected = model(tokens)
    assert actual.shape == expected.shape == (2, 64, model.config.padded_vocab_size)
    assert actual.dtype == expected.dtype == torch.float32
    assert (actual - expected).abs().max().item() < 1e-5


def test_litgpt_llama_second_batch_hits_cache(litgpt_llama):
    model, tokens = litgpt_llama
    tm = thunder.jit(model)
    other = torch.randint(0, model.config.vocab_size, tokens.shape)
    with torch.no_grad():
        tm(tokens)
        actual = tm(other)
        expected = model(other)
    assert thunder.cache_hits(tm) == 1 and thunder.cache_misses(tm) == 1
    assert (actual - expected).abs().max().item() < 1e-5


def test_litgpt_llama_trace_takes_parameters_as_inputs(litgpt_llama):
    model, tokens = litgpt_llama
    tm = thunder.jit(model)
    with torch.no_grad():
        tm(tokens)
    src = str(thunder.last_traces(tm)[-1])
    compile(src, "<trace>", "exec")
    header = next(line for line in src.splitlines() if line.startswith("def computation("))
    assert "t_lm_head_weight" in header and "t_transformer_wte_weight" in header


def test_hf_llama_logits_match_eager(hf_llama):
    model, tokens = hf_llama
    tm = thunder.jit(model)
    with torch.no_grad():
        actual = tm(tokens)
        expected = model(tokens)
    assert type(actual) is type(expected)
    assert actual.logits.shape == expected.logits.shape == (2, 16, 128)
    assert (actual.logits - expected.logits).abs().max().item() < 1e-5


def test_hf_llama_with_attention_mask_matches_eager(hf_llama):
    model, tokens = hf_llama
    mask = torch.ones_like(tokens)
    mask[1, :4] = 0  # left padding in the second sequence
    tm = thunder.jit(model)
    with torch.no_grad():
        actual = tm(input_ids=tokens, attention_mask=mask)
        expected = model(input_ids=tokens, attention_mask=mask)
    assert (actual.logits - expected.logits).abs().max().item() < 1e-5
