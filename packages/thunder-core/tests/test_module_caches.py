"""Containers a module fills during forward (timm LeViT's ``attention_bias_cache[str(device)] = ...``) get
the values the program computed, never a tracing stand-in: the compiled module keeps working, and so
does the user's module in eager."""

import torch

import thunder


class _CachedBias(torch.nn.Module):
    """Caches a tensor computed from a parameter in a dict, keyed by device, in eval mode (as timm's LeViT)."""

    def __init__(self):
        super().__init__()
        self.biases = torch.nn.Parameter(torch.randn(3, 5))
        self.idx = torch.tensor([[0, 2], [4, 1]])
        self.cache = {}
        self.seen = []

    def train(self, mode: bool = True):
        super().train(mode)
        if mode:
            self.cache = {}
        return self

    def bias(self, device):
        if self.training:
            return self.biases[:, self.idx]
        key = str(device)
        if key not in self.cache:
            self.cache[key] = self.biases[:, self.idx]
            self.seen.append(key)
        return self.cache[key]

    def forward(self, x):
        return x @ x.transpose(-1, -2) + self.bias(x.device)


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(2, 2), _CachedBias()).eval()


def test_dict_cache_filled_in_forward_holds_real_tensors():
    model, reference = _model(), _model()
    jm = thunder.jit(model)
    x = torch.randn(3, 2, 2)
    with torch.no_grad():
        expected = reference(x)
        for _ in range(3):
            torch.testing.assert_close(jm(x), expected)
    cache = model[1].cache
    assert list(cache) == ["cpu"] and type(cache["cpu"]) is torch.Tensor
    torch.testing.assert_close(cache["cpu"], reference[1].cache["cpu"])
    assert model[1].seen == ["cpu"]  # filled once, as in eager
    with torch.no_grad():
        torch.testing.assert_close(model(x), expected)  # the user's module still runs eagerly


def test_dict_cache_with_grad_enabled_and_after_train_mode():
    model, reference = _model(), _model()
    jm = thunder.jit(model)
    x = torch.randn(3, 2, 2)
    for _ in range(2):  # grad enabled: the cached value is computed from the parameter (eager keeps its graph)
        out, expected = jm(x), reference(x)
        torch.testing.assert_close(out, expected)
        assert out.requires_grad == expected.requires_grad
    assert type(model[1].cache["cpu"]) is torch.Tensor
    torch.testing.assert_close(model[1].cache["cpu"], reference[1].cache["cpu"])
    model.train()
    reference.train()
    assert model[1].cache == {}
    out, expected = jm(x), reference(x)
    torch.testing.assert_close(out, expected)
    out.sum().backward()
    expected.sum().backward()
    torch.testing.assert_close(model[1].biases.grad, reference[1].biases.grad)
    model.eval()
    reference.eval()
    with torch.no_grad():
        torch.testing.assert_close(jm(x), reference(x))
        torch.testing.assert_close(model(x), reference(x))
    assert type(model[1].cache["cpu"]) is torch.Tensor
