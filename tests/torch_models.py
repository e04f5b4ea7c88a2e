"""Small CNNs in plain ``torch.nn`` for the PyTorch importer's tests and benchmark: a
ResNet-18-shaped network (BasicBlocks, 2-2-2-2) and a MobileNetV3-small-shaped one (inverted
residuals, depthwise convolutions, squeeze-excitation, hardswish). torchvision's CPU wheel is
not on PyPI; these follow its layer structure at a smaller width. Imported only where torch is
installed."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    """ResNet's two-convolution block with a projected shortcut when the shape changes."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.downsample is None else self.downsample(x)))


class ResNetLike(nn.Module):
    """ResNet-18's layout (7x7 stem, max pool, four stages of two BasicBlocks, global
    average pool, linear) with ``width`` channels in the first stage (ResNet-18: 64)."""

    def __init__(self, width: int = 8, classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        stages = []
        cin = width
        for i, c in enumerate([width, 2 * width, 4 * width, 8 * width]):
            stages.append(nn.Sequential(BasicBlock(cin, c, 1 if i == 0 else 2),
                                        BasicBlock(c, c, 1)))
            cin = c
        self.layers = nn.Sequential(*stages)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        x = self.layers(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, (1, 1)), 1))


class SqueezeExcite(nn.Module):
    def __init__(self, c: int, r: int):
        super().__init__()
        self.fc1 = nn.Conv2d(c, r, 1)
        self.fc2 = nn.Conv2d(r, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = F.adaptive_avg_pool2d(x, 1)
        return x * F.hardsigmoid(self.fc2(F.relu(self.fc1(s))))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, exp: int, cout: int, k: int, stride: int, se: bool,
                 act: str):
        super().__init__()
        def a() -> nn.Module:
            return nn.Hardswish() if act == "hs" else nn.ReLU()
        self.expand = nn.Sequential(nn.Conv2d(cin, exp, 1, bias=False), nn.BatchNorm2d(exp),
                                    a()) if exp != cin else nn.Identity()
        self.dw = nn.Sequential(nn.Conv2d(exp, exp, k, stride, k // 2, groups=exp, bias=False),
                                nn.BatchNorm2d(exp), a())
        self.se = SqueezeExcite(exp, max(8, exp // 4)) if se else nn.Identity()
        self.proj = nn.Sequential(nn.Conv2d(exp, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.proj(self.se(self.dw(self.expand(x))))
        return x + y if self.residual else y


class MobileNetV3Like(nn.Module):
    """MobileNetV3-small's first blocks and head (hardswish stem, inverted residuals with
    squeeze-excitation, 1x1 last convolution, hardswish classifier with dropout)."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16),
                                  nn.Hardswish())
        self.blocks = nn.Sequential(
            InvertedResidual(16, 16, 16, 3, 2, True, "re"),
            InvertedResidual(16, 72, 24, 3, 2, False, "re"),
            InvertedResidual(24, 88, 24, 3, 1, False, "re"),
            InvertedResidual(24, 96, 40, 5, 2, True, "hs"),
            InvertedResidual(40, 240, 40, 5, 1, True, "hs"))
        self.last = nn.Sequential(nn.Conv2d(40, 96, 1, bias=False), nn.BatchNorm2d(96),
                                  nn.Hardswish())
        self.head = nn.Sequential(nn.Linear(96, 128), nn.Hardswish(), nn.Dropout(0.2),
                                  nn.Linear(128, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.last(self.blocks(self.stem(x)))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class MBConv(nn.Module):
    """EfficientNet's MBConv: expand 1x1 (ratio ``e``), depthwise ``k``x``k``, squeeze-
    excitation (SiLU, sigmoid; reduced from the block input's channels / 4), project 1x1,
    residual when the shape is kept (no drop-connect: inference)."""

    def __init__(self, cin: int, cout: int, e: int, k: int, stride: int):
        super().__init__()
        mid = cin * e
        self.expand = nn.Sequential(nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid),
                                    nn.SiLU()) if e != 1 else nn.Identity()
        self.dw = nn.Sequential(nn.Conv2d(mid, mid, k, stride, k // 2, groups=mid, bias=False),
                                nn.BatchNorm2d(mid), nn.SiLU())
        r = max(1, cin // 4)
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(mid, r, 1), nn.SiLU(),
                                nn.Conv2d(r, mid, 1), nn.Sigmoid())
        self.proj = nn.Sequential(nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.dw(self.expand(x))
        y = self.proj(h * self.se(h))
        return x + y if self.residual else y


class EfficientNetLike(nn.Module):
    """EfficientNet-B0's stem, its first stages (MBConv1 3x3, MBConv6 3x3 and 5x5, with
    residual repeats) at reduced width, the 1x1 head convolution and the classifier."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16),
                                  nn.SiLU())
        self.blocks = nn.Sequential(
            MBConv(16, 8, 1, 3, 1),
            MBConv(8, 12, 6, 3, 2), MBConv(12, 12, 6, 3, 1),
            MBConv(12, 20, 6, 5, 2), MBConv(20, 20, 6, 5, 1),
            MBConv(20, 40, 6, 3, 2))
        self.head = nn.Sequential(nn.Conv2d(40, 96, 1, bias=False), nn.BatchNorm2d(96),
                                  nn.SiLU())
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(96, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.head(self.blocks(self.stem(x)))
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def randomize_batch_norms(model: nn.Module, seed: int = 0) -> nn.Module:
    """Non-trivial running statistics and affine parameters (fresh ones are 0/1)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(torch.rand(m.running_mean.shape, generator=g) - 0.5)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)
                m.weight.copy_(torch.rand(m.weight.shape, generator=g) + 0.5)
                m.bias.copy_(torch.rand(m.bias.shape, generator=g) - 0.5)
    return model


class GPTBlock(nn.Module):
    """A GPT-2-style block written out by hand (token and position embeddings, one fused
    q/k/v projection split in three, a causal mask buffer applied with ``masked_fill(-inf)``,
    pre-norm attention and MLP with residuals), ReLU in the MLP."""

    def __init__(self, vocab: int = 100, d: int = 32, heads: int = 4, ctx: int = 16):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(ctx, d)
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)
        self.heads = heads
        self.register_buffer("mask", torch.tril(torch.ones(ctx, ctx)).view(1, 1, ctx, ctx))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        b, t = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(t))
        q, k, v = self.qkv(self.ln1(x)).split(x.shape[-1], dim=2)
        q = q.view(b, t, self.heads, -1).transpose(1, 2)
        k = k.view(b, t, self.heads, -1).transpose(1, 2)
        v = v.view(b, t, self.heads, -1).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / k.size(-1) ** 0.5)
        att = att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf"))
        y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).contiguous().view(b, t, -1)
        x = x + self.proj(y)
        return x + self.fc2(F.relu(self.fc(self.ln2(x))))
