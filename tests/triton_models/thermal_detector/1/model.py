"""Hot-blob detector for a 16-bit thermal camera (see config.pbtxt); validates with perception.kinds.TensorSpec."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from perception.errors import InputError
from perception.kinds import TensorSpec
from perception.types import label_id

ROWS = 100
#: The batched input as requests carry it (the config's dims plus the batch dimension).
IMAGE = TensorSpec("IMAGE", "UINT16", (-1, -1, -1, 1))


class TritonPythonModel:
    """``IMAGE [B, H, W, 1]`` uint16 -> per image the bounding box of each hot blob (pixels above
    ``hot_level``, 4-connected), scored by how hot it is, labelled car."""

    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        self.name = args["model_name"]
        self.hot_level = int(config.get("parameters", {}).get("hot_level", {}).get("string_value", "30000"))

    def execute(self, requests: list[Any]) -> list[Any]:
        responses = []
        for request in requests:
            tensor = pb_utils.get_input_tensor_by_name(request, "IMAGE")
            try:
                images = IMAGE.validate(None if tensor is None else tensor.as_numpy(), model=self.name)
            except InputError as exc:
                err = pb_utils.TritonError(f"{self.name}: invalid input {exc}")
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=err))
                continue
            out = self._detect(images)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(k, v) for k, v in out.items()]))
        return responses

    def _detect(self, images: np.ndarray[Any, Any]) -> dict[str, np.ndarray[Any, Any]]:
        b = len(images)
        out = {
            "BOXES": np.zeros((b, ROWS, 4), np.float32),
            "SCORES": np.zeros((b, ROWS), np.float32),
            "LABELS": np.zeros((b, ROWS), np.int32),
            "COUNT": np.zeros((b, 1), np.int32),
        }
        for i, image in enumerate(images):
            blobs = _blobs(image[..., 0] > self.hot_level)[:ROWS]
            for j, (x1, y1, x2, y2) in enumerate(blobs):
                heat = float(image[y1:y2, x1:x2, 0].mean()) / 65535.0
                out["BOXES"][i, j] = (x1, y1, x2, y2)
                out["SCORES"][i, j] = min(1.0, 0.4 + heat)
                out["LABELS"][i, j] = label_id("car")
            out["COUNT"][i, 0] = len(blobs)
        return out


def _blobs(hot: np.ndarray[Any, Any]) -> list[tuple[int, int, int, int]]:
    """Bounding boxes ``x1, y1, x2, y2`` (x2/y2 exclusive) of the 4-connected components of ``hot``."""
    seen = np.zeros_like(hot, dtype=bool)
    boxes = []
    for y0, x0 in zip(*np.nonzero(hot), strict=True):
        if seen[y0, x0]:
            continue
        stack, xs, ys = [(int(y0), int(x0))], [], []
        seen[y0, x0] = True
        while stack:
            y, x = stack.pop()
            xs.append(x)
            ys.append(y)
            for ny, nx in ((y + 1, x), (y - 1, x), (y, x + 1), (y, x - 1)):
                if 0 <= ny < hot.shape[0] and 0 <= nx < hot.shape[1] and hot[ny, nx] and not seen[ny, nx]:
                    seen[ny, nx] = True
                    stack.append((ny, nx))
        boxes.append((min(xs), min(ys), max(xs) + 1, max(ys) + 1))
    return boxes
