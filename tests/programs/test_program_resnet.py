"""A ResNet-style CNN classifier written the way the common torchvision-style scripts
write it: BasicBlock with 3x3 convolutions (stride 1 and 2), BatchNorm2d, a 1x1 downsample
shortcut, AdaptiveAvgPool2d, nn.Sequential, SGD with momentum, nesterov and weight decay,
a MultiStepLR or CosineAnnealingLR scheduler stepped outside the compiled step, and an
eval pass under no_grad after each training step (model.train()/model.eval()). The
compiled run must give eager's numbers after every step: losses, eval logits, learning
rates, parameters, .grad, momentum buffers and BatchNorm running statistics."""
from __future__ import annotations

import numpy as np
import pytest

import eager as torch
import eager.nn as nn
import tracer
from _program_helpers import compare_runs, snapshot

BACKENDS = ["numba", "interpret"]
STEPS, BATCH, CLASSES = 3, 4, 5


def conv3x3(in_planes, out_planes, stride=1):
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1,
                     bias=False)


def conv1x1(in_planes, out_planes, stride=1):
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        identity = x
        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)
        out = self.conv2(out)
        out = self.bn2(out)
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        out = self.relu(out)
        return out


class ResNet(nn.Module):
    def __init__(self, layers=(1,), num_classes=CLASSES, width=8):
        super().__init__()
        self.inplanes = width
        self.conv1 = nn.Conv2d(3, width, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        # one stage, stride 2 with the 1x1 downsample shortcut (torchvision's layer2 onwards;
        # a stride-1 stage adds kernels to build, not paths: its block is the same code)
        self.layer2 = self._make_layer(2 * width, layers[0], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(2 * width * BasicBlock.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _make_layer(self, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * BasicBlock.expansion:
            downsample = nn.Sequential(
                conv1x1(self.inplanes, planes * BasicBlock.expansion, stride),
                nn.BatchNorm2d(planes * BasicBlock.expansion),
            )
        layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * BasicBlock.expansion
        for _ in range(1, blocks):
            layers.append(BasicBlock(self.inplanes, planes))
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer2(x)
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        return self.fc(x)


def _data():
    rng = np.random.default_rng(0)
    images = torch.tensor(rng.standard_normal((STEPS, BATCH, 3, 8, 8)).astype(np.float32))
    labels = torch.tensor(rng.integers(0, CLASSES, size=(STEPS, BATCH)))
    return images, labels


def _run(compiled, backend, scheduler):
    torch.manual_seed(5)
    model = ResNet()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True,
                                weight_decay=5e-4)
    if scheduler == "multistep":
        sched = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[1, 2], gamma=0.1)
    else:
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=STEPS)

    def train_step(images, target):
        output = model(images)
        loss = criterion(output, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach()

    def evaluate(images):
        with torch.no_grad():
            return model(images)

    if compiled:
        train_step = tracer.function(train_step, backend=backend)
        evaluate = tracer.function(evaluate, backend=backend)
    for images, target in zip(*_data()):
        model.train()
        loss = train_step(images, target)
        model.eval()
        logits = evaluate(images)
        lr = optimizer.param_groups[0]["lr"]
        sched.step()
        yield ([loss.item(), lr] + logits.numpy().ravel().tolist(),
               snapshot([model], [optimizer]))
    if compiled:
        assert train_step.trace_count == 1 and evaluate.trace_count == 1


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("scheduler", ["multistep", "cosine"])
def test_resnet_compiled_matches_eager(backend, scheduler):
    outs = compare_runs(lambda c, b: _run(c, b, scheduler), STEPS, backend,
                        rtol=1e-4, atol=1e-5)
    assert len({o[1] for o in outs}) == STEPS  # the scheduler moved the learning rate
    assert len({o[0] for o in outs}) == STEPS and np.isfinite(outs).all()
