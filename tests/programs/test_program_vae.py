"""A VAE on 28x28 inputs, written the way the common PyTorch example scripts write it:
Linear encoder to mu/logvar, reparameterization with randn_like, a reconstruction loss
plus the KL term, Adam. Trained a few steps eagerly and through a compiled training
step with the same seed; the compiled run must give eager's numbers after every step."""
from __future__ import annotations

import numpy as np
import pytest

import eager as torch
import eager.nn as nn
import eager.nn.functional as F
import tracer
from _program_helpers import compare_runs, snapshot

BACKENDS = ["numba", "interpret"]
STEPS, BATCH, HIDDEN, LATENT = 3, 4, 32, 8


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, HIDDEN)
        self.fc21 = nn.Linear(HIDDEN, LATENT)
        self.fc22 = nn.Linear(HIDDEN, LATENT)
        self.fc3 = nn.Linear(LATENT, HIDDEN)
        self.fc4 = nn.Linear(HIDDEN, 784)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 784))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


def loss_function(recon_x, x, mu, logvar, logits=False):
    if logits:
        bce = F.binary_cross_entropy_with_logits(recon_x, x.view(-1, 784), reduction="sum")
    else:
        bce = F.binary_cross_entropy(recon_x, x.view(-1, 784), reduction="sum")
    kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return bce + kld


def _data(dtype):
    rng = np.random.default_rng(0)
    # binarized "images", as the MNIST example's inputs after thresholding
    return torch.tensor((rng.random((STEPS, BATCH, 1, 28, 28)) > 0.7).astype(dtype))


def _run(compiled, backend, dtype=np.float32, logits=False):
    torch.manual_seed(7)
    model = VAE()
    if dtype == np.float64:
        model = model.double()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def train_step(data):
        optimizer.zero_grad()
        if logits:
            mu, logvar = model.encode(data.view(-1, 784))
            z = model.reparameterize(mu, logvar)
            recon = model.fc4(F.relu(model.fc3(z)))
        else:
            recon, mu, logvar = model(data)
        loss = loss_function(recon, data, mu, logvar, logits)
        loss.backward()
        optimizer.step()
        return loss

    step = tracer.function(train_step, backend=backend) if compiled else train_step
    model.train()
    for data in _data(dtype):
        loss = step(data)
        yield [loss.item()], snapshot([model], [optimizer])
    if compiled:
        assert step.trace_count == 1


@pytest.mark.filterwarnings("error::RuntimeWarning")  # (compiled, not an eager fallback)
@pytest.mark.parametrize("backend", BACKENDS)
def test_vae_compiled_matches_eager(backend):
    losses = compare_runs(lambda c, b: _run(c, b), STEPS, backend, rtol=1e-4, atol=1e-5)
    assert len({l[0] for l in losses}) == STEPS and all(np.isfinite(losses))


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_vae_with_logits_float64_matches_eager_closely(backend="interpret"):
    # the float64 program's own kernels cost seconds to build: the IR (autodiff of
    # binary_cross_entropy_with_logits, Adam) is checked on the interpreter
    run = lambda c, b: _run(c, b, dtype=np.float64, logits=True)  # noqa: E731
    compare_runs(run, STEPS, backend, rtol=1e-10, atol=1e-12)
