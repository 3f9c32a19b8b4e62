"""Autograd semantics: accumulation, graph freeing, grad mode, custom Functions,
`autograd.grad`, in-place ops and the version counter."""
import numpy as np
import pytest

import eager
from eager.autograd import Function


def leaf(values, dtype=np.float64):
    return eager.tensor(np.asarray(values, dtype=dtype), requires_grad=True)


# --------------------------------------------------------------------------------------
# broadcasting and accumulation

@pytest.mark.parametrize("sa,sb", [((3, 4), (4,)), ((3, 1), (1, 4)), ((2, 3, 4), (3, 1)),
                                   ((), (2, 3)), ((1, 1), (5,)), ((2, 1, 3), (1, 4, 1))])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "maximum", "pow", "where"])
def test_gradients_are_reduced_to_the_input_shapes(sa, sb, op):
    rng = np.random.default_rng(0)
    a_np = rng.uniform(0.5, 2.0, sa)
    b_np = rng.uniform(0.5, 2.0, sb) + 0.01
    a, b = leaf(a_np), leaf(b_np)
    if op == "where":
        out = eager.where(a > 1.0, a, b)
    else:
        out = getattr(eager, op)(a, b)
    w = rng.standard_normal(out.shape)
    (out * eager.tensor(w)).sum().backward()
    assert a.grad.shape == sa and b.grad.shape == sb
    # reference: the broadcast gradient summed back with numpy
    A, B = np.broadcast_arrays(a_np, b_np)
    da, db = {
        "add": (w, w), "sub": (w, -w), "mul": (w * B, w * A), "div": (w / B, -w * A / B ** 2),
        "maximum": (w * (A > B), w * (B > A)),
        "pow": (w * B * A ** (B - 1), w * A ** B * np.log(A)),
        "where": (w * (A > 1), w * (A <= 1)),
    }[op]
    lead_a, lead_b = len(A.shape) - len(sa), len(A.shape) - len(sb)
    exp_a = da.sum(axis=tuple(range(lead_a))).sum(
        axis=tuple(i for i, s in enumerate(sa) if s == 1), keepdims=True).reshape(sa)
    exp_b = db.sum(axis=tuple(range(lead_b))).sum(
        axis=tuple(i for i, s in enumerate(sb) if s == 1), keepdims=True).reshape(sb)
    np.testing.assert_allclose(a.grad.numpy(), exp_a, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(b.grad.numpy(), exp_b, rtol=1e-12, atol=1e-12)


def test_python_scalars_and_0d_constants_get_no_gradient_but_leaves_do():
    x = leaf([1.0, 2.0])
    y = (2.0 * x + 1) / 4 - x ** 2
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [0.5 - 2.0, 0.5 - 4.0])


def test_gradients_accumulate_across_backward_calls():
    x = leaf([1.0, 2.0, 3.0])
    y = (x * x).sum()
    y.backward(retain_graph=True)
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0, 6.0])
    y.backward(retain_graph=True)
    np.testing.assert_allclose(x.grad.numpy(), [4.0, 8.0, 12.0])
    x.grad = None
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0, 6.0])


def test_gradients_accumulate_across_separate_graphs_and_zero_grad():
    x = leaf([1.0, 2.0])
    (x * 3).sum().backward()
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3 + 2, 3 + 4])
    lin = eager.nn.Linear(2, 1)
    lin(eager.ones(1, 2)).sum().backward()
    lin.zero_grad()
    assert all(p.grad is None or not p.grad.numpy().any() for p in lin.parameters())


def test_a_tensor_used_twice_gets_both_contributions():
    x = leaf([3.0])
    y = x * x + x.exp() * x      # diamond: x feeds several paths
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2 * 3 + np.exp(3) * 3 + np.exp(3)])


def test_second_backward_without_retain_graph_raises():
    x = leaf([1.0, 2.0])
    y = (x.exp() * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match=r"retain_graph=True"):
        y.backward()


def test_second_backward_through_a_shared_part_of_a_freed_graph_raises():
    x = leaf([1.0, 2.0])
    h = x.tanh()
    h.sum().backward()
    with pytest.raises(RuntimeError, match=r"retain_graph=True"):
        (h * 2).sum().backward()


def test_freed_graph_error_also_for_autograd_grad():
    x = leaf([1.0])
    y = (x * x).sum()
    eager.autograd.grad(y, x)
    with pytest.raises(RuntimeError, match=r"retain_graph=True"):
        eager.autograd.grad(y, x)


def test_backward_on_a_non_scalar_needs_a_gradient():
    x = leaf([1.0, 2.0])
    y = x * 2
    with pytest.raises(RuntimeError, match=r"scalar outputs.*gradient="):
        y.backward()
    y.backward(gradient=eager.tensor(np.array([1.0, 10.0])))
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 20.0])


def test_backward_gradient_must_match_the_output_shape():
    x = leaf([1.0, 2.0])
    with pytest.raises(ValueError, match=r"gradient shape"):
        (x * 2).backward(gradient=eager.ones(3, dtype=eager.float64))


def test_backward_on_a_one_element_non_scalar_and_on_a_leaf():
    x = leaf([[2.0]])
    (x * 3).backward()
    np.testing.assert_allclose(x.grad.numpy(), [[3.0]])
    z = leaf(5.0)
    z.backward()
    assert z.grad.item() == 1.0


def test_backward_on_a_tensor_that_does_not_require_grad_raises():
    with pytest.raises(RuntimeError, match=r"does not require grad"):
        eager.ones(2).sum().backward()


def test_backward_with_inputs_fills_only_those():
    a, b = leaf([1.0]), leaf([2.0])
    (a * b).sum().backward(inputs=[a])
    assert a.grad.item() == 2.0 and b.grad is None


# --------------------------------------------------------------------------------------
# leaves, non-leaves, retain_grad, detach

def test_leaf_and_non_leaf_attributes():
    x = leaf([1.0])
    y = x * 2
    assert x.is_leaf and x.grad_fn is None and x.requires_grad
    assert not y.is_leaf and y.grad_fn is not None and y.requires_grad
    assert "MulBackward" in repr(y)
    c = eager.ones(1)
    assert c.is_leaf and not c.requires_grad and not (c * 2).requires_grad


def test_non_leaf_grad_is_none_unless_retained():
    x = leaf([1.0, 2.0])
    y = x * 3
    z = y * y
    z.sum().backward()
    assert y.grad is None
    x2 = leaf([1.0, 2.0])
    y2 = x2 * 3
    y2.retain_grad()
    assert y2.retains_grad
    (y2 * y2).sum().backward()
    np.testing.assert_allclose(y2.grad.numpy(), [6.0, 12.0])
    np.testing.assert_allclose(x2.grad.numpy(), [18.0, 36.0])


def test_detach_shares_data_and_cuts_the_graph():
    x = leaf([1.0, 2.0])
    d = (x * 2).detach()
    assert not d.requires_grad and d.grad_fn is None and d.is_leaf
    y = (x * d).sum()
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0])
    e = x.detach()
    with eager.no_grad():
        e.add_(1.0)  # shares storage with x, as in PyTorch
    np.testing.assert_allclose(x.detach().numpy(), [2.0, 3.0])


def test_requires_grad_():
    x = eager.ones(2)
    assert x.requires_grad_() is x and x.requires_grad
    x.requires_grad_(False)
    assert not x.requires_grad
    with pytest.raises(RuntimeError, match="floating"):
        eager.tensor([1, 2]).requires_grad_()
    y = leaf([1.0]) * 2
    with pytest.raises(RuntimeError, match="leaf"):
        y.requires_grad_(False)


def test_numpy_of_a_tensor_requiring_grad_asks_for_detach():
    with pytest.raises(RuntimeError, match=r"detach\(\)"):
        leaf([1.0]).numpy()


# --------------------------------------------------------------------------------------
# grad mode

def test_no_grad_and_enable_grad_as_context_managers():
    x = leaf([1.0])
    assert eager.is_grad_enabled()
    with eager.no_grad():
        assert not eager.is_grad_enabled()
        y = x * 2
        with eager.enable_grad():
            assert eager.is_grad_enabled()
            z = x * 2
        assert not eager.is_grad_enabled()
    assert eager.is_grad_enabled()
    assert not y.requires_grad and y.grad_fn is None
    assert z.requires_grad and z.grad_fn is not None


def test_no_grad_and_enable_grad_as_decorators():
    x = leaf([1.0])

    @eager.no_grad()
    def f(t):
        assert not eager.is_grad_enabled()
        return t * 2

    @eager.enable_grad()
    def g(t):
        return t * 2

    assert not f(x).requires_grad
    with eager.no_grad():
        assert g(x).requires_grad
    assert eager.is_grad_enabled()
    assert f.__name__ == "f"


def test_grad_mode_is_restored_after_an_exception():
    with pytest.raises(ZeroDivisionError):
        with eager.no_grad():
            1 / 0
    assert eager.is_grad_enabled()


def test_set_grad_enabled():
    with eager.set_grad_enabled(False):
        assert not eager.is_grad_enabled()
    assert eager.is_grad_enabled()
    eager.set_grad_enabled(False)  # also works as a plain call, as in PyTorch
    try:
        assert not eager.is_grad_enabled()
        assert not (leaf([1.0]) * 2).requires_grad
    finally:
        eager.set_grad_enabled(True)
    assert eager.is_grad_enabled()


# --------------------------------------------------------------------------------------
# custom Functions

class Square(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g


class ScaledMul(Function):
    """a * b * scale, with a non-tensor argument and needs_input_grad."""

    @staticmethod
    def forward(ctx, a, b, scale):
        ctx.save_for_backward(a, b)
        ctx.scale = scale
        return a * b * scale

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        ga = g * b * ctx.scale if ctx.needs_input_grad[0] else None
        gb = g * a * ctx.scale if ctx.needs_input_grad[1] else None
        return ga, gb, None


def test_custom_function_square():
    x = leaf([1.0, -2.0, 3.0])
    y = Square.apply(x)
    assert y.grad_fn is not None and "Square" in type(y.grad_fn).__name__ + repr(y.grad_fn)
    np.testing.assert_allclose(y.detach().numpy(), [1.0, 4.0, 9.0])
    (y * eager.tensor(np.array([1.0, 2.0, 3.0]))).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, -8.0, 18.0])


def test_custom_function_composes_with_registry_ops_and_forward_runs_without_grad():
    seen = []

    class Probe(Function):
        @staticmethod
        def forward(ctx, x):
            seen.append(eager.is_grad_enabled())
            return x.exp()

        @staticmethod
        def backward(ctx, g):
            return g * 10

    x = leaf([0.0, 1.0])
    y = Probe.apply(x.tanh()) * 3
    y.sum().backward()
    assert seen == [False]
    np.testing.assert_allclose(x.grad.numpy(), 30 * (1 - np.tanh([0.0, 1.0]) ** 2))


def test_custom_function_needs_input_grad_and_non_tensor_args():
    a, b = leaf([2.0]), eager.tensor(np.array([5.0]))
    calls = []

    class Spy(ScaledMul):
        @staticmethod
        def backward(ctx, g):
            calls.append(ctx.needs_input_grad)
            return ScaledMul.backward(ctx, g)

    Spy.apply(a, b, 3.0).sum().backward()
    assert calls == [(True, False, False)]
    np.testing.assert_allclose(a.grad.numpy(), [15.0])
    assert b.grad is None


def test_custom_function_without_grad_inputs_records_nothing():
    y = Square.apply(eager.tensor(np.array([3.0])))
    assert y.grad_fn is None and not y.requires_grad
    with eager.no_grad():
        assert Square.apply(leaf([3.0])).grad_fn is None


def test_custom_function_saved_tensors_are_freed_after_backward():
    x = leaf([2.0])
    y = Square.apply(x)
    y.sum().backward()
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        y.sum().backward()


def test_custom_function_saved_tensor_modified_in_place_raises():
    x = leaf([2.0])
    h = x * 1
    y = Square.apply(h)
    h.add_(1)
    with pytest.raises(RuntimeError, match="inplace"):
        y.sum().backward()


def test_custom_function_wrong_number_of_gradients():
    class Bad(Function):
        @staticmethod
        def forward(ctx, a, b):
            return a + b

        @staticmethod
        def backward(ctx, g):
            return g, g, g

    with pytest.raises(RuntimeError, match="returned 3 gradients"):
        Bad.apply(leaf([1.0]), leaf([1.0])).sum().backward()


# --------------------------------------------------------------------------------------
# autograd.grad

def test_autograd_grad_returns_gradients_without_touching_dot_grad():
    x = leaf([1.0, 2.0])
    y = (x ** 2).sum()
    (g,) = eager.autograd.grad(y, [x])
    np.testing.assert_allclose(g.numpy(), [2.0, 4.0])
    assert x.grad is None and not g.requires_grad


def test_autograd_grad_with_create_graph_is_differentiable():
    x = leaf([1.0, 2.0])
    y = (x.exp() * x).sum()
    (g,) = eager.autograd.grad(y, x, create_graph=True)
    assert g.requires_grad
    np.testing.assert_allclose(g.detach().numpy(), np.exp([1.0, 2.0]) * (1 + np.array([1, 2])))
    g.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.exp([1.0, 2.0]) * (2 + np.array([1, 2])))


def test_autograd_grad_of_several_outputs_and_inputs():
    a, b = leaf([1.0, 2.0]), leaf([3.0])
    ga, gb = eager.autograd.grad([(a * b).sum(), (a * a).sum()], [a, b])
    np.testing.assert_allclose(ga.numpy(), [3.0 + 2.0, 3.0 + 4.0])
    np.testing.assert_allclose(gb.numpy(), [3.0])


def test_autograd_grad_of_an_intermediate_and_grad_outputs():
    x = leaf([1.0, 2.0])
    h = x * 3
    y = h * h
    (gh,) = eager.autograd.grad(y, h, grad_outputs=eager.tensor(np.array([1.0, 0.5])))
    np.testing.assert_allclose(gh.numpy(), [6.0, 6.0])


def test_autograd_grad_unused_inputs():
    a, b = leaf([1.0]), leaf([1.0])
    y = (a * 2).sum()
    with pytest.raises(RuntimeError, match="allow_unused"):
        eager.autograd.grad(y, [a, b], retain_graph=True)
    ga, gb = eager.autograd.grad(y, [a, b], allow_unused=True)
    assert ga.item() == 2.0 and gb is None


def test_autograd_grad_of_an_input_not_requiring_grad_raises():
    with pytest.raises(RuntimeError, match="does not require grad"):
        eager.autograd.grad((leaf([1.0]) * 2).sum(), [eager.ones(1)])


# --------------------------------------------------------------------------------------
# in-place ops and the version counter

def test_in_place_ops_update_values_and_gradients():
    x = leaf([1.0, -2.0, 3.0])
    y = x * 2
    y.add_(1).sub_(0.5).mul_(3)
    np.testing.assert_allclose(y.detach().numpy(), (np.array([1, -2, 3]) * 2 + 0.5) * 3)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [6.0, 6.0, 6.0])


def test_add_with_alpha_in_place_and_out_of_place():
    x = leaf([1.0, 2.0])
    y = x * 1
    y.add_(x, alpha=2)
    np.testing.assert_allclose(y.detach().numpy(), [3.0, 6.0])
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 3.0])


def test_clamp_in_place_masks_the_gradient():
    x = leaf([-2.0, 0.5, 3.0])
    y = x * 1
    y.clamp_(-1, 1)
    np.testing.assert_allclose(y.detach().numpy(), [-1.0, 0.5, 1.0])
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [0.0, 1.0, 0.0])


def test_zero_and_copy_in_place():
    x = leaf([1.0, 2.0])
    s = leaf([5.0, 6.0])
    y = x * 3
    y.zero_()
    np.testing.assert_array_equal(y.detach().numpy(), [0.0, 0.0])
    y.copy_(s * 2)
    np.testing.assert_allclose(y.detach().numpy(), [10.0, 12.0])
    (y * eager.tensor(np.array([1.0, 10.0]))).sum().backward()
    np.testing.assert_allclose(s.grad.numpy(), [2.0, 20.0])
    assert x.grad is None or not x.grad.numpy().any()  # overwritten: no gradient reaches x


def test_copy_broadcasts_and_casts_the_source():
    y = eager.zeros(2, 3)
    y.copy_(eager.tensor(np.array([1.0, 2.0, 3.0])))
    assert y.dtype == eager.float32
    np.testing.assert_array_equal(y.numpy(), [[1, 2, 3], [1, 2, 3]])


def test_in_place_ops_bump_the_version():
    y = eager.ones(2)
    v0 = y._version[0]
    y.add_(1)
    y.mul_(2)
    y.zero_()
    assert y._version[0] == v0 + 3


@pytest.mark.parametrize("modify", [lambda t: t.add_(1), lambda t: t.sub_(1),
                                    lambda t: t.mul_(2), lambda t: t.zero_(),
                                    lambda t: t.copy_(eager.ones(t.shape, dtype=t.dtype)),
                                    lambda t: t.clamp_(0, 1)])
def test_modifying_a_saved_output_in_place_breaks_backward(modify):
    x = leaf([0.5, 1.0])
    y = x.exp()           # exp saves its output
    modify(y)
    with pytest.raises(RuntimeError, match=r"modified by an inplace operation.*ExpBackward"):
        y.sum().backward()


def test_modifying_a_saved_input_in_place_breaks_backward():
    x = leaf([0.5, 1.0])
    h = x * 2
    y = h * h             # mul saves both inputs
    h.add_(1)
    with pytest.raises(RuntimeError, match=r"inplace.*MulBackward"):
        y.sum().backward()


def test_modifying_an_unsaved_input_in_place_is_fine():
    x = leaf([0.5, 1.0])
    h = x * 2
    y = h + 1             # add saves nothing
    h.mul_(10)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0])


def test_in_place_through_a_view_writes_the_base_and_shares_its_version():
    y = eager.zeros(2, 3)
    row = y[1]
    row.add_(1)
    np.testing.assert_array_equal(y.numpy(), [[0, 0, 0], [1, 1, 1]])
    x = leaf([[0.5, 1.0], [2.0, 3.0]])
    h = x * 1
    z = h * h                # mul saves h
    with eager.no_grad():
        h[0].mul_(2)         # a write through a view bumps h's version too
    with pytest.raises(RuntimeError, match=r"inplace.*MulBackward"):
        z.sum().backward()


def test_in_place_with_autograd_on_a_view_or_its_base_raises():
    # PyTorch rebases the other tensor's history (CopySlices); eager refuses rather than
    # returning a gradient that misses the write
    x = leaf([[1.0, 1.0], [1.0, 1.0]])
    h = x * 1
    row = h[0]
    with pytest.raises(RuntimeError, match=r"mul_: in-place .*view.*test_autograd.py"):
        row.mul_(2)
    with pytest.raises(RuntimeError, match=r"add_: in-place .*view"):
        h.add_(1)
    base = eager.zeros(2, 2)
    with pytest.raises(RuntimeError, match=r"copy_: in-place .*view"):
        base[0].copy_(x[0] * 2)


def test_in_place_on_a_leaf_requiring_grad_raises_in_grad_mode():
    x = leaf([1.0, 2.0])
    for op in (lambda: x.add_(1), lambda: x.mul_(2), lambda: x.zero_(),
               lambda: x.copy_(eager.ones(2)), lambda: x.clamp_(0, 1), lambda: x.sub_(1)):
        with pytest.raises(RuntimeError, match="leaf"):
            op()
    with eager.no_grad():
        x.add_(1)  # what optimizers do
    np.testing.assert_allclose(x.detach().numpy(), [2.0, 3.0])
    assert x.is_leaf and x.requires_grad


def test_in_place_cannot_broadcast_the_target_or_downcast_category():
    y = eager.zeros(3)
    with pytest.raises(ValueError, match="in-place"):
        y.add_(eager.ones(2, 3))
    k = eager.tensor([1, 2])
    with pytest.raises(TypeError, match="can't be cast"):
        k.add_(0.5)
    k.add_(eager.tensor([1, 1], dtype=eager.int32))  # same category: fine
    assert k.dtype == eager.int64 and k.tolist() == [2, 3]


def test_in_place_on_a_saved_output_fails_for_every_later_use():
    x = leaf([1.0, 2.0])
    y = x.tanh()
    y.mul_(2)            # tanh saved its output y, which is now changed
    z = y * 3            # any backward reaching TanhBackward must fail
    with pytest.raises(RuntimeError, match="TanhBackward"):
        z.sum().backward()


def test_autograd_grad_fills_no_retained_grad():
    # As PyTorch: autograd.grad (and backward(inputs=...)) write no .grad, a retained
    # intermediate's included; before, grad() filled it (check mode's own gradient check
    # then leaked into a user's retain_grad() tensor).
    x = eager.ones(3, requires_grad=True)
    h = x * 2
    h.retain_grad()
    (g,) = eager.autograd.grad((h * h).sum(), [x], retain_graph=True)
    assert h.grad is None and x.grad is None
    np.testing.assert_allclose(g.numpy(), [8.0, 8.0, 8.0])
    (h * h).sum().backward(inputs=[x], retain_graph=True)
    assert h.grad is None
    (h * h).sum().backward()
    np.testing.assert_allclose(h.grad.numpy(), [4.0, 4.0, 4.0])
