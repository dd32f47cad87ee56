"""LinearModel's CSR kernels (``sparse_inputs="auto"``): the same scores and gradients as the
dense layer (a float64 dense reference), used only for a repeated sparse full batch in
training, never a host sync, and invisible to copies, pickles and checkpoints."""

from __future__ import annotations

import copy
import io

import pytest
import torch

from fairgames.models import LinearModel, build_model
from fairgames.models.sparse_inputs import MIN_ELEMENTS
from fairgames.rates import no_host_sync
from fairgames.train.helpers import model_options


def sparse_features(n: int = 6000, d: int = 40, density: float = 0.1, seed: int = 0,
                    dtype: torch.dtype = torch.float32) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=gen, dtype=dtype)
    return x * (torch.rand(n, d, generator=gen) < density).to(dtype)


def model_like(x: torch.Tensor, sparse: str = "auto", output: str = "score", bias: bool = True,
               seed: int = 1) -> LinearModel:
    torch.manual_seed(seed)
    m = LinearModel(x.shape[1], bias=bias, output=output, sparse_inputs=sparse).to(x.dtype)
    torch.nn.init.normal_(m.linear.weight)
    if bias:
        torch.nn.init.normal_(m.linear.bias)
    return m


def scores_and_grads(m: LinearModel, x: torch.Tensor, g: torch.Tensor):
    m.zero_grad()
    s = m(x)
    (s * g).sum().backward()
    grads = [p.grad.clone() for p in m.parameters()]
    return s.detach(), grads


def reference(m: LinearModel, x: torch.Tensor, g: torch.Tensor):
    """The dense product and its gradient in float64 (the independent reference)."""
    w = m.linear.weight.detach().double().requires_grad_()
    b = (m.linear.bias.detach().double().requires_grad_() if m.linear.bias is not None
         else None)
    s = x.double() @ w[0] + (b if b is not None else 0.0)
    if m.output == "unit":
        s = torch.sigmoid(s)
    (s * g.double()).sum().backward()
    return s.detach(), [w.grad] + ([b.grad] if b is not None else [])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("output,bias", [("score", True), ("unit", True), ("score", False)])
def test_scores_and_gradients_equal_the_dense_reference(dtype, output, bias):
    x = sparse_features(dtype=dtype)
    m = model_like(x, output=output, bias=bias)
    g = torch.randn(len(x), generator=torch.Generator().manual_seed(3), dtype=dtype)
    scores_and_grads(m, x, g)                    # first sight: dense
    s, grads = scores_and_grads(m, x, g)         # second: CSR
    assert m._csr._pair is not None
    ref_s, ref_grads = reference(m, x, g)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(s.double(), ref_s, rtol=tol, atol=tol)
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got.double(), want.reshape(got.shape), rtol=tol,
                                   atol=tol * float(want.abs().max()))


def test_the_result_does_not_depend_on_the_thread_count():
    x = sparse_features()
    g = torch.randn(len(x), generator=torch.Generator().manual_seed(3))
    threads = torch.get_num_threads()
    out = []
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            m = model_like(x)
            scores_and_grads(m, x, g)
            out.append(scores_and_grads(m, x, g))
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(out[0][0], out[1][0])
    assert all(torch.equal(a, b) for a, b in zip(out[0][1], out[1][1], strict=True))


def test_only_a_repeated_sparse_training_batch_takes_the_csr_kernels():
    x = sparse_features()
    m = model_like(x)
    m(x)
    assert m._csr._pair is None                  # seen once
    m(x[:3000])                                  # a minibatch: another tensor
    m(x)
    assert m._csr._pair is None                  # not twice in a row
    m(x)
    assert m._csr._pair is not None
    dense = sparse_features(density=0.9)
    m2 = model_like(dense)
    m2(dense), m2(dense)
    assert m2._csr._pair is None                 # too dense to gain
    small = sparse_features(n=MIN_ELEMENTS // 40 - 1)
    m3 = model_like(small)
    m3(small), m3(small)
    assert m3._csr._pair is None                 # small: stays in cache, dense wins
    for setting in ("eval", "no_grad", "off"):
        m4 = model_like(x, sparse="off" if setting == "off" else "auto")
        if setting == "eval":
            m4.eval()
        with torch.set_grad_enabled(setting != "no_grad"):
            m4(x), m4(x)
        assert m4._csr._pair is None, setting


def test_an_in_place_change_of_the_batch_rebuilds_the_csr_form():
    x = sparse_features()
    m = model_like(x)
    m(x), m(x)
    x.mul_(2.0)                                  # same tensor, new values (version bumps)
    g = torch.ones(len(x))
    s, _ = scores_and_grads(m, x, g)
    s, grads = scores_and_grads(m, x, g)
    assert m._csr._pair is not None
    ref_s, ref_grads = reference(m, x, g)
    torch.testing.assert_close(s.double(), ref_s, rtol=1e-5, atol=1e-5)


def test_copies_pickles_and_state_dicts_leave_the_csr_form_behind():
    x = sparse_features()
    m = model_like(x)
    m(x), m(x)
    assert copy.deepcopy(m)._csr._pair is None
    buf = io.BytesIO()
    torch.save(m, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    assert loaded._csr._pair is None and loaded.sparse_inputs == "auto"
    assert set(m.state_dict()) == {"linear.weight", "linear.bias"}
    torch.testing.assert_close(loaded(x), m(x))


def test_training_steps_take_no_host_sync():
    x = sparse_features()
    m = model_like(x)
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    with no_host_sync():
        for _ in range(3):
            opt.zero_grad()
            torch.nn.functional.softplus(m(x)).mean().backward()
            opt.step()
    assert m._csr._pair is not None


def test_full_batch_training_follows_the_dense_trajectory():
    """Adam, 30 full-batch steps: the two kernels' rounding differences stay at rounding."""
    x = sparse_features()
    y = (x[:, 0] > 0).float()
    params = []
    for sparse in ("auto", "off"):
        m = model_like(x, sparse=sparse)
        opt = torch.optim.Adam(m.parameters(), lr=0.01)
        for _ in range(30):
            opt.zero_grad()
            torch.nn.functional.binary_cross_entropy_with_logits(m(x), y).backward()
            opt.step()
        params.append(torch.cat([p.detach().reshape(-1) for p in m.parameters()]))
    torch.testing.assert_close(params[0], params[1], rtol=1e-4, atol=1e-5)


def test_the_option_is_checked_and_older_configs_read_as_off():
    with pytest.raises(ValueError, match="sparse_inputs"):
        build_model("linear", 3, sparse_inputs="always")
    assert build_model("linear", 3).sparse_inputs == "auto"
    assert model_options({"name": "linear", "bias": True})["sparse_inputs"] == "off"
