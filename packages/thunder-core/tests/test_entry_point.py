"""The jitted callable with the function's own signature (thunder.entry_point): every parameter kind reaches the
program as eager passes it, a call that does not match the signature raises eager's TypeError, and cache hits
are counted once per call."""

import functools

import pytest
import torch

import thunder


def every_kind(a, /, b, *rest, c, **extra):
    out = a * b + c
    for r in rest:
        out = out + r
    for v in extra.values():
        out = out * v
    return out


def test_every_parameter_kind_is_passed_on_as_eager_does():
    jf = thunder.jit(every_kind)
    x, y, z = torch.randn(3), torch.randn(3), torch.randn(3)
    calls = [
        ((x, y), {"c": z}),
        ((x,), {"b": y, "c": z}),  # the same values bound by keyword: the first program answers
        ((x, y, z, z), {"c": z, "scale": y}),
        ((x, y, z, z), {"c": z, "scale": y}),  # the same call again: a cache hit
    ]
    for args, kwargs in calls:
        torch.testing.assert_close(jf(*args, **kwargs), every_kind(*args, **kwargs))
    assert (thunder.cache_misses(jf), thunder.cache_hits(jf)) == (2, 2)


def _scaled_when_given_by_keyword(g):
    @functools.wraps(g)  # inspect.signature(wrapper) is g's (x, scale); the wrapper itself takes (*args, **kwargs)
    def wrapper(*args, **kwargs):
        out = g(*args, **kwargs)
        return out * 10 if "scale" in kwargs else out

    return wrapper


@_scaled_when_given_by_keyword
def wrapped_mul(x, scale):
    return x * scale


def test_a_wrapper_sees_keyword_arguments_as_keywords():
    # the entry point takes the parameters of the function called, not of the one it wraps: passing
    # ``scale`` on positionally gave 2s where eager gives 20s
    jf = thunder.jit(wrapped_mul)
    x, s = torch.ones(2), torch.full((2,), 2.0)
    torch.testing.assert_close(jf(x, scale=s), wrapped_mul(x, scale=s))
    torch.testing.assert_close(jf(x, scale=s), wrapped_mul(x, scale=s))  # the cache hit too
    torch.testing.assert_close(jf(x, s), wrapped_mul(x, s))


def test_a_call_that_does_not_match_the_signature_raises_eagers_type_error():
    def add(a, b):
        return a + b

    jf = thunder.jit(add)
    x = torch.randn(2)
    jf(x, x)
    with pytest.raises(TypeError, match=r"add\(\) missing 1 required positional argument: 'b'"):
        jf(x)
    with pytest.raises(TypeError, match="unexpected keyword argument 'c'"):
        jf(x, x, c=x)
    assert thunder.cache_hits(jf) == 0 and thunder.cache_misses(jf) == 1


def test_parameters_named_like_the_entry_points_own_names():
    def f(_thunder_p, _thunder_r):
        return _thunder_p - _thunder_r

    jf = thunder.jit(f)
    x, y = torch.randn(2), torch.randn(2)
    torch.testing.assert_close(jf(x, y), x - y)
    torch.testing.assert_close(jf(_thunder_r=x, _thunder_p=y), y - x)
    assert thunder.cache_hits(jf) == 1


def test_hits_are_counted_once_per_call_from_every_path():
    def mul(a, b):
        return a * b

    jf = thunder.jit(mul)
    small, large = torch.randn(2), torch.randn(2, 3)
    jf(small, small)  # compiles: a miss, not a hit
    assert (thunder.cache_misses(jf), thunder.cache_hits(jf)) == (1, 0)
    jf(small, small)  # the last entry's prologue answers
    jf(large, large)  # compiles a second program
    jf(small, small)  # found by lookup, after the last entry's prologue refused it
    jf(small, small)
    assert (thunder.cache_misses(jf), thunder.cache_hits(jf)) == (2, 3)


def test_a_function_named_like_a_keyword_or_without_a_signature():
    def f(a, b):
        return a + b

    f.__name__ = f.__qualname__ = "class"  # not a name a def can have
    jf = thunder.jit(f)
    x = torch.randn(2)
    torch.testing.assert_close(jf(x, x), x + x)
    jsin = thunder.jit(torch.sin)  # a builtin: no introspectable signature, the generic form
    torch.testing.assert_close(jsin(x), torch.sin(x))
    torch.testing.assert_close(jsin(x), torch.sin(x))
    assert thunder.cache_hits(jsin) == 1
