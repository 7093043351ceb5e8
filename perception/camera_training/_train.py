"""Training loop and ONNX export (torch)."""

from __future__ import annotations

import contextlib
import logging
import math
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import numpy.typing as npt
import torch
from torch import Tensor
from torch.nn import functional

from perception.modelkit._camera import NET_HEIGHT, NET_WIDTH, ONNX_OUTPUTS, normalize_images

from ._data import Dataset, augment, make_targets
from ._net import CenterNet, ExportWrapper
from ._settings import TrainSettings

__all__ = ["TrainSettings", "export_onnx", "train"]

log = logging.getLogger("perception.camera_training")

#: ONNX opset of the export (supported by every onnxruntime >= 1.14).
OPSET = 17


def _seed_everything(seed: int, threads: int) -> np.random.Generator:
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(threads)
    with contextlib.suppress(RuntimeError):  # only settable before the first parallel region
        torch.set_num_interop_threads(1)
    return np.random.default_rng(seed)


def _batch(data: Dataset, indices: npt.NDArray[np.int64], rng: np.random.Generator) -> dict[str, Tensor]:
    images, heats, weights, sizes, offsets, masks = [], [], [], [], [], []
    for i in indices:
        boxes, labels, positive = data.objects(int(i))
        image, boxes, positive, kept = augment(data.images[int(i)], boxes, positive, rng)
        t = make_targets(boxes, labels[kept], positive)
        images.append(image)
        heats.append(t.heat)
        weights.append(t.weight)
        sizes.append(t.size)
        offsets.append(t.offset)
        masks.append(t.mask)
    return {
        "image": torch.from_numpy(normalize_images(np.stack(images))),
        "heat": torch.from_numpy(np.stack(heats)),
        "weight": torch.from_numpy(np.stack(weights)),
        "size": torch.from_numpy(np.stack(sizes)),
        "offset": torch.from_numpy(np.stack(offsets)),
        "mask": torch.from_numpy(np.stack(masks)),
    }


def focal_loss(logits: Tensor, heat: Tensor, weight: Tensor) -> Tensor:
    """CenterNet's penalty-reduced focal loss (alpha 2, beta 4), normalised by the number of centres."""
    pos = heat.eq(1.0).float()
    p = torch.sigmoid(logits)
    pos_loss = functional.logsigmoid(logits) * (1 - p).pow(2) * pos
    neg_loss = functional.logsigmoid(-logits) * p.pow(2) * (1 - heat).pow(4) * (1 - pos) * weight
    return -(pos_loss.sum() + neg_loss.sum()) / pos.sum().clamp(min=1.0)


def losses(outputs: tuple[Tensor, Tensor, Tensor], batch: dict[str, Tensor]) -> dict[str, Tensor]:
    logits, size, offset = outputs
    mask = batch["mask"].unsqueeze(1)
    n = mask.sum().clamp(min=1.0)
    return {
        "heat": focal_loss(logits, batch["heat"], batch["weight"]),
        "size": (functional.l1_loss(size, batch["size"], reduction="none") * mask).sum() / n,
        "offset": (functional.l1_loss(offset, batch["offset"], reduction="none") * mask).sum() / n,
    }


def train(data: Dataset, settings: TrainSettings) -> CenterNet:
    """Train a :class:`CenterNet` on ``data`` (reproducible for equal data, settings and thread count)."""
    rng = _seed_everything(settings.seed, settings.threads)
    net = CenterNet()
    log.info("network: %d parameters; %d training images", sum(p.numel() for p in net.parameters()), len(data))
    steps_per_epoch = math.ceil(len(data) / settings.batch_size)
    total = settings.epochs * steps_per_epoch
    opt = torch.optim.AdamW(net.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=settings.lr, total_steps=total, pct_start=0.15)
    t0 = time.monotonic()
    # Batches are made (augmentation, targets) one step ahead in a helper thread; the generator is only
    # ever used there, in order, so the run stays reproducible.
    order = [rng.permutation(len(data)) for _ in range(settings.epochs)]
    plan = [
        (epoch, perm[b * settings.batch_size : (b + 1) * settings.batch_size])
        for epoch, perm in enumerate(order)
        for b in range(steps_per_epoch)
    ]
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="batches") as pool:
        pending = pool.submit(_batch, data, plan[0][1], rng)
        sums: dict[str, float] = {}
        for step, (epoch, _) in enumerate(plan):
            batch = pending.result()
            if step + 1 < len(plan):
                pending = pool.submit(_batch, data, plan[step + 1][1], rng)
            net.train()
            parts = losses(net(batch["image"]), batch)
            loss = parts["heat"] + parts["size"] + parts["offset"]
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 10.0)
            opt.step()
            sched.step()
            for k, v in parts.items():
                sums[k] = sums.get(k, 0.0) + float(v.detach())
            if (step + 1) % steps_per_epoch:
                continue
            elapsed = time.monotonic() - t0
            log.info(
                "epoch %d/%d: %s (%.0f s)",
                epoch + 1,
                settings.epochs,
                ", ".join(f"{k} {v / steps_per_epoch:.3f}" for k, v in sums.items()),
                elapsed,
            )
            sums = {}
            if settings.time_budget_s is not None and elapsed > settings.time_budget_s:
                log.warning("time budget of %.0f s exhausted after epoch %d", settings.time_budget_s, epoch + 1)
                pending.cancel()
                break
    net.eval()
    return net


def export_onnx(net: CenterNet, out: Path) -> None:
    """Export ``net`` (sigmoid folded in, dynamic batch) to ``out`` and check onnxruntime agrees with torch."""
    import onnxruntime as ort

    wrapper = ExportWrapper(net).eval()
    dummy = torch.zeros(1, 3, NET_HEIGHT, NET_WIDTH)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp.onnx")
    names = ["image", *ONNX_OUTPUTS]
    torch.onnx.export(
        wrapper,
        (dummy,),
        str(tmp),
        dynamo=False,
        input_names=["image"],
        output_names=list(ONNX_OUTPUTS),
        dynamic_axes={n: {0: "batch"} for n in names},
        opset_version=OPSET,
        do_constant_folding=True,
    )
    probe = torch.from_numpy(np.random.default_rng(0).normal(size=(2, 3, NET_HEIGHT, NET_WIDTH)).astype(np.float32))
    with torch.no_grad():
        expected = [t.numpy() for t in wrapper(probe)]
    session = ort.InferenceSession(str(tmp), providers=["CPUExecutionProvider"])
    got = session.run(list(ONNX_OUTPUTS), {"image": probe.numpy()})
    for name, e, g in zip(ONNX_OUTPUTS, expected, got, strict=True):
        err = float(np.max(np.abs(e - g)))
        if err > 1e-3:
            raise RuntimeError(f"onnxruntime disagrees with torch on {name}: max abs error {err}")
    tmp.replace(out)
    log.info("exported %s (%.2f MB)", out, out.stat().st_size / 1e6)
