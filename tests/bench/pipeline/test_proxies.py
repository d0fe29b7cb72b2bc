"""Each proxy against an independent small computation (float64, stated tolerance)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

import nas
from bench.pipeline import proxies

TOL = {"rtol": 1e-9, "atol": 1e-9}


def _linear(weight: list[list[float]], bias: bool = False) -> nn.Linear:
    w = torch.tensor(weight, dtype=torch.float64)
    layer = nn.Linear(w.shape[1], w.shape[0], bias=bias).double()
    with torch.no_grad():
        layer.weight.copy_(w)
    return layer


def test_naswot_is_the_log_determinant_of_the_hamming_kernel_of_hand_made_codes():
    # Identity first layer: the ReLU codes are exactly the signs of the inputs.
    net = nn.Sequential(_linear([[1, 0, 0], [0, 1, 0], [0, 0, 1]]), nn.ReLU(), _linear([[1, 1, 1]]))
    x = torch.tensor([[1.0, -1, 1], [1, 1, -1], [-1, -1, 1], [1, 1, 1]], dtype=torch.float64)
    codes = [[v > 0 for v in row] for row in x.tolist()]
    n_a = 3
    kernel = np.array([[n_a - sum(a != b for a, b in zip(ci, cj, strict=True)) for cj in codes] for ci in codes])
    expected = np.linalg.slogdet(kernel.astype(float))[1]
    assert proxies.naswot(net, x, torch.zeros(4, dtype=torch.long)) == pytest.approx(expected, rel=1e-12)


def test_synflow_on_a_linear_chain_is_depth_times_the_abs_weight_path_sum():
    # R = 1^T |W2| |W1| 1 is linear in each layer, so sum theta dR/dtheta = L * R (Euler).
    w1 = [[0.5, -2.0], [1.5, 0.25], [-1.0, 3.0]]
    w2 = [[2.0, -0.5, 1.0]]
    net = nn.Sequential(_linear(w1), _linear(w2))
    r = np.ones(1) @ np.abs(w2) @ np.abs(w1) @ np.ones(2)
    got = proxies.synflow(net, torch.zeros(5, 2, dtype=torch.float64), torch.zeros(5))
    assert got == pytest.approx(math.log(2 * float(r)), rel=1e-12)


def _softmax_grad(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """dCE/dW of a bias-free linear classifier: (softmax(x W^T) - onehot)^T x / N."""
    logits = x @ w.T
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(len(y)), y] -= 1
    return p.T @ x / len(y)


@pytest.fixture
def classifier():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(3, 4, generator=g, dtype=torch.float64)
    x = torch.randn(6, 4, generator=g, dtype=torch.float64)
    y = torch.tensor([0, 1, 2, 0, 1, 2])
    return nn.Sequential(_linear(w.tolist())), w.numpy(), x, y


def test_snip_is_the_summed_abs_weight_times_analytic_gradient(classifier):
    net, w, x, y = classifier
    g = _softmax_grad(w, x.numpy(), y.numpy())
    assert proxies.snip(net, x, y) == pytest.approx(math.log(np.abs(w * g).sum()), rel=1e-9)


def test_grad_norm_is_the_norm_of_the_analytic_gradient(classifier):
    net, w, x, y = classifier
    g = _softmax_grad(w, x.numpy(), y.numpy())
    assert proxies.grad_norm(net, x, y) == pytest.approx(math.log(np.linalg.norm(g)), rel=1e-9)


def test_ntk_condition_of_a_linear_map_is_that_of_the_input_gram_matrix(classifier):
    # Gradient of 1^T W x_i w.r.t. W is 1 x_i^T, so Theta = C * X X^T.
    net, _, x, y = classifier
    x4 = x[:4]
    eig = np.linalg.eigvalsh(x4.numpy() @ x4.numpy().T)
    assert proxies.ntk_condition(net, x4, y[:4]) == pytest.approx(-math.log(eig[-1] / eig[0]), rel=1e-8)


def test_jacob_cov_of_a_linear_map_sees_identical_jacobians(classifier):
    # Every J_i = W^T 1 is the same, so the correlation matrix is all ones: eigenvalues N, 0, ...
    net, _, x, y = classifier
    n, k = len(x), 1e-5
    expected = -((math.log(n + k) + 1 / (n + k)) + (n - 1) * (math.log(k) + 1 / k))
    assert proxies.jacob_cov(net, x, y) == pytest.approx(expected, rel=1e-6)


def test_swap_counts_the_distinct_sample_wise_patterns():
    net = nn.Sequential(_linear([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 0, 0]]), nn.ReLU(), _linear([[1, 1, 1, 1]]))
    x = torch.tensor([[1.0, -1, 1], [1, 1, -1], [-1, 1, 1]], dtype=torch.float64)
    columns = {tuple(bool(v > 0) for v in col) for col in (x @ net[0].weight.T).T.tolist()}
    assert proxies.swap(net, x, torch.zeros(3)) == pytest.approx(math.log(len(columns)))


def test_az_trainability_uses_the_spectral_norm_of_each_linear_block():
    spec = {
        "input_shape": [5],
        "blocks": [
            {"layers": [{"type": "linear", "out": 4, "bias": False}]},
            {"layers": [{"type": "linear", "out": 3, "bias": False}]},
        ],
    }
    net = nas.build_model(spec, seed=1).double()
    sigmas = [float(torch.linalg.matrix_norm(m.weight.detach(), 2)) for _, m in net.weighted_layers()]
    s_t = -np.mean([s + 1 / s for s in sigmas])
    x = torch.randn(4, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    got = proxies.az_trainability(net, x, torch.zeros(4), iterations=30)
    assert got == pytest.approx(-math.log(-s_t / 2), rel=1e-3)  # power iteration, 30 steps


def test_zico_matches_a_per_batch_loop(classifier):
    net, w, x, y = classifier
    grads = np.stack(
        [_softmax_grad(w, xb, yb) for xb, yb in zip(np.split(x.numpy(), 2), np.split(y.numpy(), 2), strict=True)]
    )
    sd, mean_abs = grads.std(0), np.abs(grads).mean(0)
    expected = math.log((mean_abs[sd > 0] / sd[sd > 0]).sum())
    assert proxies.zico(net, x, y, batches=2) == pytest.approx(expected, rel=1e-9)


def test_meco_of_one_conv_layer_is_the_min_eigenvalue_of_its_channel_correlation():
    conv = nn.Conv2d(1, 3, 3, padding=1, bias=False).double()
    x = torch.randn(2, 1, 5, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    fea = conv(x)[0].detach().reshape(3, -1).numpy()
    expected = max(np.linalg.eigvalsh(np.corrcoef(fea))[0], 0.0)
    assert proxies.meco(nn.Sequential(conv), x, torch.zeros(2)) == pytest.approx(expected, abs=1e-10)


def test_naswot_and_swap_are_nan_without_activations(classifier):
    net, _, x, y = classifier
    assert math.isnan(proxies.naswot(net, x, y))
    assert math.isnan(proxies.swap(net, x, y))


def test_every_proxy_is_finite_on_a_normal_network():
    spec = {
        "input_shape": [64],
        "blocks": [
            {"layers": [{"type": "linear", "out": 64}, {"type": "relu"}]},
            {"layers": [{"type": "linear", "out": 64}, {"type": "relu"}]},
            {"layers": [{"type": "linear", "out": 10}]},
        ],
    }
    net = nas.build_model(spec, seed=0)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 64, generator=g), torch.randint(0, 10, (64,), generator=g)
    results = proxies.compute_proxies(net, x, y)
    assert set(results) == set(proxies.PROXIES)
    bad = {k: v["score"] for k, v in results.items() if not math.isfinite(v["score"])}
    assert not bad, f"non-finite proxies on a plain ReLU MLP: {bad}"


def _bn_convnet() -> nn.Module:
    spec = {
        "input_shape": [3, 8, 8],
        "blocks": [
            {"layers": [{"type": "conv2d", "out": 8, "kernel": 3}, {"type": "batchnorm"}, {"type": "relu"}]},
            {"layers": [{"type": "conv2d", "out": 8, "kernel": 3}, {"type": "batchnorm"}, {"type": "relu"}]},
            {"layers": [{"type": "global_avgpool"}, {"type": "linear", "out": 10}]},
        ],
    }
    return nas.build_model(spec, seed=0)


def test_naswot_and_swap_leave_the_callers_batchnorm_statistics_where_they_were():
    net = _bn_convnet()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    g = torch.Generator().manual_seed(0)
    x, y = 3.0 + 2.0 * torch.randn(32, 3, 8, 8, generator=g), torch.randint(0, 10, (32,), generator=g)
    proxies.naswot(net, x, y)
    proxies.swap(net, x, y)
    after = net.state_dict()
    moved = [k for k in before if not torch.equal(before[k], after[k])]
    assert not moved, f"the proxies moved the caller's {moved}"
    assert net.training  # and left its mode alone


def test_synflow_reads_the_same_network_whether_or_not_naswot_ran_before_it():
    """synflow runs in eval mode, on the running statistics: a naswot that moved them (it ran the
    caller's network in train mode) changed synflow's figure on every BatchNorm network."""
    g = torch.Generator().manual_seed(0)
    x, y = 3.0 + 2.0 * torch.randn(32, 3, 8, 8, generator=g), torch.randint(0, 10, (32,), generator=g)
    alone = proxies.synflow(_bn_convnet(), x[:1], y[:1])
    net = _bn_convnet()
    proxies.naswot(net, x, y)
    assert proxies.synflow(net, x[:1], y[:1]) == alone


def test_compute_proxies_reruns_only_the_proxies_revised_since_the_results_it_keeps():
    net = _bn_convnet()
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 3, 8, 8, generator=g), torch.randint(0, 10, (64,), generator=g)
    stored = {name: {"score": -123.0, "seconds": 7.0} for name in proxies.PROXIES}  # no version: version 1
    results = proxies.compute_proxies(net, x, y, kept=stored)
    revised = set(proxies.revisions())
    assert revised == {"synflow"}
    for name, result in results.items():
        assert result["version"] == proxies.PROXIES[name].version
        kept = result["score"] == -123.0 and result["seconds"] == 7.0
        assert kept == (name not in revised), name
    assert results["synflow"]["score"] == proxies.synflow(net, x[:1], y[:1])
    again = proxies.compute_proxies(net, x, y, kept=results)  # everything current: nothing reruns
    assert again == results
