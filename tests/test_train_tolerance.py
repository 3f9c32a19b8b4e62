"""The training workloads' verification: parameters whose exact gradient is zero (W9's key
biases) are held to what Adam can move them, the rest normwise (benchmarks.timing.compare)."""
import numpy as np

from benchmarks import gpt
from benchmarks.timing import NormTolerance, compare
from benchmarks.trainrefs import adam_move_bound

SMALL = {"batch": 2, "context": 8, "vocab": 11, "width": 16, "layers": 2}


def _adam_moves(grads, lr, betas, eps=1e-8):
    """How far plain Adam moves one element for this gradient sequence, step by step."""
    b1, b2 = betas
    m = v = p = 0.0
    for t, g in enumerate(grads, 1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        p -= lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
    return abs(p)


def test_adam_move_bound_holds_for_any_gradients_and_is_reached():
    lr, betas = 1e-3, (0.9, 0.95)
    assert adam_move_bound(lr, betas, 1) == lr
    bound = adam_move_bound(lr, betas, 3)
    assert 3 * lr <= bound <= 3 * lr * 1.001
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(2000):
        scale = 10.0 ** rng.uniform(-12, 1)
        worst = max(worst, _adam_moves(rng.standard_normal(3) * scale, lr, betas))
    assert worst <= bound
    # gradients of one sign and equal size come within eps of it
    assert _adam_moves([1.0, 1.0, 1.0], lr, betas) > bound * 0.999


def test_w9_key_bias_gradient_is_zero_in_float64_and_masked():
    inputs = gpt.gpt_inputs(np.random.default_rng(5), **SMALL)
    ref = gpt.ref_gpt_train(inputs, steps=2)
    free = ref["_free"]
    names = gpt.names(SMALL["layers"])
    assert sorted(free) == sorted(f"param[{k}]" for k, n in enumerate(names)
                                  if n.endswith("qkv.bias"))
    for name, (mask, bound) in free.items():
        assert mask.sum() == SMALL["width"] and bound == adam_move_bound(
            gpt.LR_GPT, gpt.BETAS_GPT, 2) * (1 + 1e-6)
        g = ref[name.replace("param", "grad")]
        assert np.abs(g[mask]).max() <= 1e-12 * np.abs(g[~mask]).max()


def test_compare_leaves_the_rounding_set_part_out_of_the_norm_but_bounds_it():
    base = {"param[0]": np.zeros(6)}
    ref = {"param[0]": np.array([0.1, 0.1, 0.0, 0.0, 0.1, 0.1])}
    mask = np.array([False, False, True, True, False, False])
    tol = {"param": NormTolerance(1e-3)}
    noisy = {"param[0]": np.array([0.1, 0.1, 5e-4, -8e-4, 0.1, 0.1])}
    assert not compare(noisy, ref, tol, base)["verified"]   # the noise alone fails the norm
    assert compare(noisy, ref, tol, base, {"param[0]": (mask, 1e-3)})["verified"]
    wild = {"param[0]": np.array([0.1, 0.1, 2e-3, 0.0, 0.1, 0.1])}
    check = compare(wild, ref, tol, base, {"param[0]": (mask, 1e-3)})
    assert not check["verified"] and "more than Adam can move it" in check["detail"]
    off = {"param[0]": np.array([0.101, 0.1, 0.0, 0.0, 0.1, 0.1])}   # outside the mask
    assert not compare(off, ref, tol, base, {"param[0]": (mask, 1e-3)})["verified"]
