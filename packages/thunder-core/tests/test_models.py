"""Real models, built from small configs with random weights (nothing is downloaded): thunder's
forward output equals eager PyTorch's (eval mode, no grad)."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from training_checks import assert_step_like_eager

import thunder


def _compare(model: nn.Module, *args, atol=1e-5, rtol=1e-5, **kwargs):
    model.eval()
    with torch.no_grad():
        expected = model(*args, **kwargs)
        jm = thunder.jit(model)
        actual = jm(*args, **kwargs)
    fallbacks = [r["fn"] for r in thunder.last_interpreter_log(jm) if r["symbol"] == "fallback"]
    return actual, expected, fallbacks


# ---------------------------------------------------------------- LitGPT

litgpt = pytest.importorskip("litgpt", reason="the litgpt package is an optional test dependency")

_LITGPT_BASE = dict(block_size=64, vocab_size=128, padded_vocab_size=128, n_layer=2, n_embd=32, n_head=4)
LITGPT_CONFIGS = {
    "llama": dict(
        rotary_percentage=1.0,
        parallel_residual=False,
        bias=False,
        norm_class_name="RMSNorm",
        mlp_class_name="LLaMAMLP",
        intermediate_size=64,
    ),
    "llama-gqa": dict(
        n_query_groups=2,
        rotary_percentage=1.0,
        parallel_residual=False,
        bias=False,
        norm_class_name="RMSNorm",
        mlp_class_name="LLaMAMLP",
        intermediate_size=64,
    ),
    "pythia": dict(rotary_percentage=0.25, parallel_residual=True, bias=True, norm_class_name="LayerNorm"),
    "gemma": dict(
        rotary_percentage=1.0,
        parallel_residual=False,
        bias=False,
        norm_class_name="RMSNorm",
        mlp_class_name="GemmaMLP",
        gelu_approximate="tanh",
        intermediate_size=64,
        scale_embeddings=True,
        n_query_groups=1,
        head_size=8,
    ),
    "phi": dict(
        rotary_percentage=0.5,
        parallel_residual=True,
        bias=True,
        shared_attention_norm=True,
        norm_class_name="LayerNorm",
        mlp_class_name="GptNeoxMLP",
        gelu_approximate="tanh",
        lm_head_bias=True,
    ),
    "mixtral-moe": dict(
        rotary_percentage=1.0,
        parallel_residual=False,
        bias=False,
        norm_class_name="RMSNorm",
        mlp_class_name="LLaMAMoE",
        intermediate_size=48,
        n_expert=4,
        n_expert_per_token=2,
        n_query_groups=2,
    ),
}


@pytest.mark.parametrize("name", [n for n in LITGPT_CONFIGS if n != "mixtral-moe"])
def test_litgpt(name):
    from litgpt import GPT, Config

    torch.manual_seed(0)
    config = Config(**_LITGPT_BASE, **LITGPT_CONFIGS[name])
    model = GPT(config)
    idx = torch.randint(0, 128, (2, 16))
    actual, expected, fallbacks = _compare(model, idx)
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)
    assert not fallbacks, fallbacks


def test_litgpt_mixtral_moe_routing_with_data_dependent_sizes():
    """LitGPT's LLaMAMoE routes tokens with ``torch.where(mask)``: how many tokens each expert gets depends on
    the data. Those sizes are traced as run-time sizes (read from the routing's output), so the whole model
    is one program: forward and gradients equal eager's, for any routing."""
    from litgpt import GPT, Config

    torch.manual_seed(0)
    model = GPT(Config(**_LITGPT_BASE, **LITGPT_CONFIGS["mixtral-moe"]))
    ref = copy.deepcopy(model)
    jm = thunder.jit(model)
    for seed in (0, 1):
        idx = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(seed))
        actual, expected = jm(idx), ref(idx)
        assert_step_like_eager(model, ref, actual, expected)
    assert thunder.cache_misses(jm) == 1  # another routing is the same program


def test_litgpt_kv_cache_decode():
    """Generation with a KV cache: the cache buffers are updated in place (index_copy_) inside forward."""
    from litgpt import GPT, Config

    torch.manual_seed(0)
    config = Config(**_LITGPT_BASE, **LITGPT_CONFIGS["llama-gqa"])
    model, eager = GPT(config), GPT(config)
    eager.load_state_dict(model.state_dict())
    for m in (model, eager):
        m.eval()
        m.set_kv_cache(batch_size=1, max_seq_length=32)
    jm = thunder.jit(model)
    prompt = torch.randint(0, 128, (1, 5))
    with torch.no_grad():
        pos = torch.arange(5)
        torch.testing.assert_close(jm(prompt, pos), eager(prompt, pos), atol=1e-5, rtol=1e-5)
        for step in range(5, 8):
            tok = torch.randint(0, 128, (1, 1))
            pos = torch.tensor([step])
            torch.testing.assert_close(jm(tok, pos), eager(tok, pos), atol=1e-5, rtol=1e-5)
    for (k, a), (_, b) in zip(model.state_dict().items(), eager.state_dict().items()):
        torch.testing.assert_close(a, b, msg=k)


# ---------------------------------------------------------------- Hugging Face transformers

transformers = pytest.importorskip("transformers", reason="transformers is an optional test dependency")


def _hf_causal(config_cls_name: str, **extra):
    cfg_cls = getattr(transformers, config_cls_name)
    return cfg_cls(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        **extra,
    )


HF_MODELS = {
    "llama": lambda: transformers.LlamaForCausalLM(_hf_causal("LlamaConfig")),
    "mistral": lambda: transformers.MistralForCausalLM(_hf_causal("MistralConfig", sliding_window=8)),
    "qwen2": lambda: transformers.Qwen2ForCausalLM(_hf_causal("Qwen2Config")),
    "gpt2": lambda: transformers.GPT2LMHeadModel(
        transformers.GPT2Config(vocab_size=128, n_positions=64, n_embd=32, n_layer=2, n_head=4)
    ),
    "bert": lambda: transformers.BertModel(
        transformers.BertConfig(
            vocab_size=128,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            max_position_embeddings=64,
        )
    ),
    "t5": lambda: transformers.T5ForConditionalGeneration(
        transformers.T5Config(vocab_size=128, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4)
    ),
}


def _hf_outputs(out):
    return out.logits if hasattr(out, "logits") else out.last_hidden_state


@pytest.mark.parametrize("name", HF_MODELS)
def test_hf(name):
    torch.manual_seed(0)
    model = HF_MODELS[name]()
    ids = torch.randint(0, 128, (2, 12))
    kwargs = {"use_cache": False} if name != "bert" else {}
    if name == "t5":
        kwargs["decoder_input_ids"] = torch.randint(0, 128, (2, 5))
    if name in ("bert", "llama"):
        mask = torch.ones(2, 12, dtype=torch.long)
        mask[1, :3] = 0  # left padding
        kwargs["attention_mask"] = mask
    actual, expected, fallbacks = _compare(model, ids, **kwargs)
    torch.testing.assert_close(_hf_outputs(actual), _hf_outputs(expected), atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------- nanoGPT-style, written here


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size, flash: bool):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head = n_head
        self.flash = flash
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if self.flash:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size, flash):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size, flash)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd), nn.Dropout(0.1)
        )

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class NanoGPT(nn.Module):
    def __init__(self, vocab=96, block_size=32, n_layer=2, n_embd=32, n_head=4, flash=True):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList([Block(n_embd, n_head, block_size, flash) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying

    def forward(self, idx, targets=None):
        t = idx.size(1)
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        if targets is None:
            return logits
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


@pytest.mark.parametrize("flash", [True, False])
def test_nanogpt(flash):
    torch.manual_seed(0)
    model = NanoGPT(flash=flash)
    idx = torch.randint(0, 96, (2, 16))
    targets = torch.randint(0, 96, (2, 16))
    targets[0, :4] = -1
    (actual, loss), (expected, eloss), fallbacks = _compare(model, idx, targets)
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(loss, eloss, atol=1e-5, rtol=1e-5)
    assert not fallbacks, fallbacks


def test_litgpt_mixtral_moe_runs_through_thunderfx():
    """The path for data-dependent routing: ThunderFX lets Dynamo break the graph there, Thunder compiles the rest."""
    import torch._dynamo
    from litgpt import GPT, Config

    from thunder.dynamo import thunderfx

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = GPT(Config(**_LITGPT_BASE, **LITGPT_CONFIGS["mixtral-moe"])).eval()
    idx = torch.randint(0, 128, (2, 16))
    with torch.no_grad():
        expected = model(idx)
        compiled = thunderfx(model)
        actual = compiled(idx)
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)
    torch._dynamo.reset()
