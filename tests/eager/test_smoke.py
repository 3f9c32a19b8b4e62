import numpy as np

import eager


def test_backward_of_square_sum():
    x = eager.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0, 6.0])


def test_small_classifier_trains():
    eager.manual_seed(0)
    model = eager.nn.Sequential(eager.nn.Linear(4, 16), eager.nn.ReLU(), eager.nn.Linear(16, 3))
    x = eager.randn(32, 4)
    y = eager.argmax(x[:, :3], dim=1)
    opt = eager.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(150):
        loss = eager.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.05
