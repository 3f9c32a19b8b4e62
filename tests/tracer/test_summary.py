"""`ConcreteFunction.summary()`: one line of what a compiled call runs (issue 17, the README
tour's IR summary), pinned, and checked against the program's own step list."""
import numpy as np

import eager
import eager.nn.functional as F
import tracer


def relu_argmax(x, w):
    return F.relu(x @ w.T).argmax(dim=1)


def _args():
    return eager.randn(8, 16), eager.randn(4, 16)


def _counted_from_steps(c) -> dict:
    """Step kinds counted from the printout `describe_steps()` (its first word per line)."""
    counts: dict = {}
    for text in c.program.describe_steps().splitlines()[1:-1]:
        kind = text.split()[0]
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def test_summary_names_kernels_blas_calls_numpy_steps_and_views():
    f = tracer.function(relu_argmax, backend="numba")
    x, w = _args()
    c = f.get_concrete_function(x, w)
    assert c.summary() == ("relu_argmax: 4 IR equations -> 1 kernel (1 elementwise), "
                           "1 BLAS call, 1 numpy step, 1 view, 0 numpy fallbacks")
    assert _counted_from_steps(c) == {"view": 1, "blas": 1, "kernel": 1, "numpy": 1}
    assert len(c.kernels) == 1 and len(c.graph.eqns) == 4
    np.testing.assert_array_equal(f(x, w).numpy(), relu_argmax(x, w).numpy())


def test_summary_of_a_training_step_matches_its_program():
    eager.manual_seed(0)
    model = eager.nn.Linear(16, 4)
    opt = eager.optim.SGD(model.parameters(), lr=0.1)
    x, y = eager.randn(8, 16), eager.randint(0, 4, (8,))

    @tracer.function(backend="numba")
    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    step(x, y)
    c = step.get_concrete_function(x, y)
    text = c.summary()
    counted = _counted_from_steps(c)
    assert text.startswith(f"step: {len(c.graph.eqns)} IR equations -> {len(c.kernels)} kernel")
    assert f"{counted['blas']} BLAS call" in text and counted["blas"] == 2   # x @ W.T, dW (x needs no grad)
    assert counted.get("fallback", 0) == 0 and "0 numpy fallbacks" in text
    assert counted["kernel"] == len(c.kernels)


def test_summary_on_the_interpret_backend():
    f = tracer.function(relu_argmax, backend="interpret")
    c = f.get_concrete_function(*_args())
    assert c.summary() == ("relu_argmax: 4 IR equations, run op by op by the reference "
                           "interpreter")
