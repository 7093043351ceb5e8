"""The camera detector network: a small strided-conv backbone, an FPN-style top-down neck back to
stride 4, and CenterNet heads (class heatmap, log-size, sub-cell offset).

Input ``[B, 3, NET_HEIGHT, NET_WIDTH]`` from :func:`perception.modelkit._camera.preprocess_images`; outputs as
documented in :mod:`perception.modelkit._camera` (the heatmap logits go through a sigmoid in
:class:`ExportWrapper`, i.e. inside the exported graph).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn import functional

from perception.modelkit._camera import NUM_CLASSES

__all__ = ["CenterNet", "ExportWrapper"]

#: Heatmap bias at init so every cell starts at p = 0.1 (CenterNet's prior; stabilises focal loss).
_HEATMAP_PRIOR = 0.1


def _conv_bn(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class CenterNet(nn.Module):
    """Backbone strides 2..32, top-down merge to stride 4, three heads. Returns raw maps
    ``(heatmap_logits, size, offset)``."""

    def __init__(
        self, widths: tuple[int, int, int, int, int] = (16, 24, 48, 64, 96), neck: int = 48, head: int = 32
    ) -> None:
        super().__init__()
        w0, w1, w2, w3, w4 = widths
        self.stem = _conv_bn(3, w0, 2)  # /2
        self.c1 = nn.Sequential(_conv_bn(w0, w1, 2), _conv_bn(w1, w1))  # /4
        self.c2 = nn.Sequential(_conv_bn(w1, w2, 2), _conv_bn(w2, w2))  # /8
        self.c3 = nn.Sequential(_conv_bn(w2, w3, 2), _conv_bn(w3, w3))  # /16
        self.c4 = nn.Sequential(_conv_bn(w3, w4, 2), _conv_bn(w4, w4))  # /32
        self.lat4 = nn.Conv2d(w4, neck, 1)
        self.lat3 = nn.Conv2d(w3, neck, 1)
        self.lat2 = nn.Conv2d(w2, neck, 1)
        self.lat1 = nn.Conv2d(w1, head, 1)
        self.reduce2 = nn.Conv2d(neck, head, 1)
        self.smooth3 = _conv_bn(neck, neck)
        self.smooth2 = _conv_bn(neck, neck)
        self.smooth1 = _conv_bn(head, head)  # stride 4: the most expensive layer, kept narrow
        self.heatmap = nn.Conv2d(head, NUM_CLASSES, 1)
        self.size = nn.Conv2d(head, 2, 1)
        self.offset = nn.Conv2d(head, 2, 1)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        nn.init.normal_(self.heatmap.weight, std=0.01)
        nn.init.constant_(self.heatmap.bias, -math.log((1 - _HEATMAP_PRIOR) / _HEATMAP_PRIOR))
        nn.init.normal_(self.size.weight, std=0.01)
        nn.init.constant_(self.size.bias, 1.0)  # ~ e * stride = 11 px boxes at init
        nn.init.normal_(self.offset.weight, std=0.01)
        nn.init.constant_(self.offset.bias, 0.5)

    @staticmethod
    def _up_add(top: Tensor, lateral: Tensor) -> Tensor:
        return lateral + functional.interpolate(top, size=lateral.shape[-2:], mode="nearest")

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        f1 = self.c1(self.stem(x))
        f2 = self.c2(f1)
        f3 = self.c3(f2)
        f4 = self.c4(f3)
        p3 = self.smooth3(self._up_add(self.lat4(f4), self.lat3(f3)))
        p2 = self.smooth2(self._up_add(p3, self.lat2(f2)))
        h = self.smooth1(self._up_add(self.reduce2(p2), self.lat1(f1)))
        return self.heatmap(h), self.size(h), self.offset(h)


class ExportWrapper(nn.Module):
    """What is exported to ONNX: the network with the heatmap sigmoid folded in."""

    def __init__(self, net: CenterNet) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        logits, size, offset = self.net(x)
        return torch.sigmoid(logits), size, offset
