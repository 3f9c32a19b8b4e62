"""A small DCGAN (two layers a side, 8x8 images) written the way the common PyTorch example
script writes it: a ConvTranspose2d generator with BatchNorm2d and ReLU/Tanh, a Conv2d
discriminator with LeakyReLU, two Adam optimizers, BCELoss against real_label/fake_label
targets made with fill_, and the fake batch detached for the discriminator step. The D step
and the G step are each compiled; the compiled run must give eager's numbers after every
step."""
from __future__ import annotations

import numpy as np
import pytest

import eager as torch
import eager.nn as nn
import tracer
from _program_helpers import compare_runs, snapshot

BACKENDS = ["numba", "interpret"]
STEPS, BATCH, NZ, NGF, NDF, NC = 3, 4, 8, 8, 8, 1


def weights_init(m):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        nn.init.normal_(m.weight.data, 0.0, 0.02)
    elif classname.find("BatchNorm") != -1:
        nn.init.normal_(m.weight.data, 1.0, 0.02)
        nn.init.constant_(m.bias.data, 0)


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(
            # NZ x 1 x 1 -> NGF x 4 x 4
            nn.ConvTranspose2d(NZ, NGF, 4, 1, 0, bias=False),
            nn.BatchNorm2d(NGF),
            nn.ReLU(True),
            # -> NC x 8 x 8
            nn.ConvTranspose2d(NGF, NC, 4, 2, 1, bias=False),
            nn.Tanh(),
        )

    def forward(self, input):
        return self.main(input)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(
            # NC x 8 x 8 -> NDF x 4 x 4
            nn.Conv2d(NC, NDF, 4, 2, 1, bias=False),
            nn.LeakyReLU(0.2, inplace=True),
            # -> (NDF*2) x 2 x 2
            nn.Conv2d(NDF, NDF * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(NDF * 2),
            nn.LeakyReLU(0.2, inplace=True),
            # -> 1 x 1 x 1
            nn.Conv2d(NDF * 2, 1, 2, 1, 0, bias=False),
            nn.Sigmoid(),
        )

    def forward(self, input):
        return self.main(input).view(-1, 1).squeeze(1)


def _data():
    rng = np.random.default_rng(0)
    return torch.tensor(np.tanh(rng.standard_normal((STEPS, BATCH, NC, 8, 8)))
                        .astype(np.float32))


def _setup():
    torch.manual_seed(999)
    netG = Generator()
    netG.apply(weights_init)
    netD = Discriminator()
    netD.apply(weights_init)
    optimizerD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optimizerG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
    netG.train()
    netD.train()
    return netG, netD, optimizerG, optimizerD


def _run_as_written(compiled, backend):
    """The example's loop body cut in two as written: the D step hands the fake batch, with
    its graph through netG, to the G step, and each returns losses that need gradients."""
    netG, netD, optimizerG, optimizerD = _setup()
    criterion = nn.BCELoss()
    real_label, fake_label = 1.0, 0.0

    def d_step(real_cpu):
        netD.zero_grad()
        b_size = real_cpu.size(0)
        label = torch.full((b_size,), real_label, dtype=torch.float)
        output = netD(real_cpu)
        errD_real = criterion(output, label)
        errD_real.backward()
        D_x = output.mean()
        noise = torch.randn(b_size, NZ, 1, 1)
        fake = netG(noise)
        label.fill_(fake_label)
        output = netD(fake.detach())
        errD_fake = criterion(output, label)
        errD_fake.backward()
        errD = errD_real + errD_fake
        optimizerD.step()
        return errD, D_x, fake, label

    def g_step(fake, label):
        netG.zero_grad()
        label.fill_(real_label)  # fake labels are real for the generator cost
        output = netD(fake)
        errG = criterion(output, label)
        errG.backward()
        optimizerG.step()
        return errG, output.mean()

    if compiled:
        d_step = tracer.function(d_step, backend=backend)
        g_step = tracer.function(g_step, backend=backend)
    for real in _data():
        errD, D_x, fake, label = d_step(real)
        errG, D_G_z2 = g_step(fake, label)
        yield ([errD.item(), D_x.item(), errG.item(), D_G_z2.item()],
               snapshot([netG, netD], [optimizerG, optimizerD]))


def _run_compilable(compiled, backend, steps=None):
    """The same training written so that both steps compile: each returns only values that
    need no gradient, and the G step makes its fake batch from the same noise again."""
    netG, netD, optimizerG, optimizerD = _setup()
    criterion = nn.BCELoss()
    real_label, fake_label = 1.0, 0.0

    def d_step(real_cpu, noise):
        netD.zero_grad()
        label = torch.empty(real_cpu.size(0))
        label.fill_(real_label)
        output = netD(real_cpu)
        errD_real = criterion(output, label)
        errD_real.backward()
        fake = netG(noise)
        label.fill_(fake_label)
        output = netD(fake.detach())
        errD_fake = criterion(output, label)
        errD_fake.backward()
        optimizerD.step()
        return (errD_real + errD_fake).detach(), output.mean().detach()

    def g_step(noise):
        netG.zero_grad()
        label = torch.full((noise.size(0),), real_label)
        output = netD(netG(noise))
        errG = criterion(output, label)
        errG.backward()
        optimizerG.step()
        return errG.detach(), output.mean().detach()

    if compiled:
        d_step = tracer.function(d_step, backend=backend)
        g_step = tracer.function(g_step, backend=backend)
    for real in _data():
        noise = torch.randn(BATCH, NZ, 1, 1)
        errD, D_G_z1 = d_step(real, noise)
        errG, D_G_z2 = g_step(noise)
        yield ([errD.item(), D_G_z1.item(), errG.item(), D_G_z2.item()],
               snapshot([netG, netD], [optimizerG, optimizerD]))
    if compiled:
        assert d_step.trace_count == 1 and g_step.trace_count == 1


def test_dcgan_as_written_runs_eagerly_with_a_warning(backend="interpret"):
    # a compiled function cannot hand out a graph for backward() outside while it also
    # updates state: it runs eagerly (the documented limit), so the numbers are eager's.
    # The decision comes before any backend is asked (tracer/autodiff.py build_plan), so
    # one backend covers it; with Numba the trace's kernels would still be built first
    with pytest.warns(RuntimeWarning, match="runs eagerly"):
        outs = compare_runs(_run_as_written, STEPS, backend, rtol=1e-6, atol=1e-7)
    assert len({o[0] for o in outs}) == STEPS and np.isfinite(outs).all()


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("backend", BACKENDS)
def test_dcgan_compiled_matches_eager(backend):
    outs = compare_runs(_run_compilable, STEPS, backend, rtol=1e-4, atol=1e-5)
    assert len({o[0] for o in outs}) == STEPS and np.isfinite(outs).all()
