"""PyTorch's own OpInfo database (``op_db``) through ``thunder.jit`` on CPU: float32 values (and
inputs updated in place) and float64 gradients against eager. A corpus we did not write.

Known failures live in ``op_db_known_failures.txt`` and run as strict xfails, so a fix shows up as
an XPASS failure: then regenerate the file with ``python packages/thunder-core/tests/op_db_refresh.py``.

Knobs: ``THUNDER_OP_DB_SAMPLES`` (sample inputs per case, default 2) and ``THUNDER_OP_DB_VARIANTS``
(comma-separated among ``function,method,inplace``; default ``function,inplace``: the method
variants mostly repeat the functions and are left to local runs). ``pytest -k 'softmax and grad'``
runs one op.
"""

from __future__ import annotations

import os
import warnings

import pytest

pytest.importorskip("expecttest", reason="PyTorch's op_db needs expecttest (declared in thunder-core[test])")

import op_db_support as support  # noqa: E402

_VARIANTS = set(os.environ.get("THUNDER_OP_DB_VARIANTS", "function,inplace").split(","))
_KNOWN = support.read_known_failures()


def _params():
    params = []
    for case, op in support.cases(support.load_op_db()):
        if case.variant not in _VARIANTS or _KNOWN.get(case.key) == support.NO_SAMPLE:
            continue
        marks = []
        if case.key in _KNOWN:
            marks.append(pytest.mark.xfail(reason=f"known op_db failure: {_KNOWN[case.key]}", strict=True))
        params.append(pytest.param(case, op, id=f"{case.op}-{case.variant}-{case.kind}", marks=marks))
    return params


@pytest.mark.parametrize(("case", "op"), _params())
def test_op_db(case: support.Case, op) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecation notices that PyTorch's samples trigger
        checked = support.check_case(case, op)
    assert checked, f"{case.key}: eager accepts none of its samples; op_db_refresh.py lists it as {support.NO_SAMPLE}"
