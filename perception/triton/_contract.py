"""Tensor contracts: what a model declares (from its Triton config) and what each sensor kind needs.

Dims follow Triton's ``config.pbtxt`` convention: ``-1`` is a variable dimension and, when
``max_batch_size > 0``, the batch dimension is implicit (not part of ``dims``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perception.errors import ConfigError, ModelContractError
from perception.kinds import TensorSpec, camera_input_size, kind_def, known_kinds

__all__ = ["ModelContract", "check_contract", "check_encoded_input", "parse_model_config"]


@dataclass(frozen=True, slots=True)
class ModelContract:
    """A model's name, ``max_batch_size`` (0 = no implicit batch dim) and tensors.

    ``instances`` is the number of execution instances the server runs (the sum of the config's
    ``instance_group`` counts, times the GPUs each group lists; 1 when unknown). It is not part of the
    contract a sensor kind needs; the runtime warms every instance up.

    ``input_size`` is a camera model's network input ``(width, height)`` when its config states it
    (:data:`CAMERA_INPUT_SIZE_KEYS`); ``None`` otherwise (the runtime then sends full-size images).
    """

    name: str
    max_batch_size: int
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    instances: int = 1
    input_size: tuple[int, int] | None = None

    def input(self, name: str) -> TensorSpec | None:
        return next((t for t in self.inputs if t.name == name), None)

    def output(self, name: str) -> TensorSpec | None:
        return next((t for t in self.outputs if t.name == name), None)


def check_contract(kind: str, contract: ModelContract) -> None:
    """Raise :class:`ModelContractError` unless ``contract`` (a served model) fits sensor ``kind``.

    Every expected input and output must exist with a compatible dtype and dims (``-1`` on either side
    matches anything); extra outputs are allowed (a user's model may return more), the kind's optional
    ``decode_error`` output only as the contract states it; extra inputs are not unless ``optional``
    (the runtime would not send them).
    """
    if kind not in known_kinds():
        raise ModelContractError(
            f"unknown sensor kind {kind!r} (known: {', '.join(sorted(known_kinds()))})", model=contract.name
        )
    expected = kind_def(kind).contract
    if expected.batched != (contract.max_batch_size > 0):
        need = "> 0 (batched" if expected.batched else "0 (unbatched"
        raise ModelContractError(
            f"{kind} model must have max_batch_size {need}), it has {contract.max_batch_size}",
            model=contract.name,
        )
    for role, want_specs, have_specs in (
        ("input", expected.inputs, contract.inputs),
        ("output", expected.outputs, contract.outputs),
    ):
        have = {t.name: t for t in have_specs}
        for want in want_specs:
            spec = have.get(want.name)
            if spec is None:
                raise ModelContractError(
                    f"{kind} model lacks {role} {want.name} (expected {want}; it has "
                    f"{', '.join(map(str, have_specs)) or 'none'})",
                    model=contract.name,
                    tensor=want.name,
                )
            why = want.accepts(spec)
            if why is not None:
                raise ModelContractError(f"{role} {want.name}: {why}", model=contract.name, tensor=want.name)
    optional_output = expected.decode_error  # a model may answer it; when it does, as the contract says
    served = None if optional_output is None else contract.output(optional_output.name)
    if optional_output is not None and served is not None:
        why = optional_output.accepts(served)
        if why is not None:
            raise ModelContractError(f"output {served.name}: {why}", model=contract.name, tensor=served.name)
    extra = sorted({t.name for t in contract.inputs if not t.optional} - {t.name for t in expected.inputs})
    if extra:
        raise ModelContractError(
            f"{kind} model has input(s) the runtime does not send: {', '.join(extra)}",
            model=contract.name,
            tensor=extra[0],
        )


def check_encoded_input(kind: str, contract: ModelContract, sensors: Sequence[str]) -> None:
    """Raise :class:`ConfigError` naming the sensors unless ``contract`` (a served model) takes the
    encoded image of ``kind`` (its contract's ``encoded`` input) that ``sensors`` send (``decode: server``)."""
    want = kind_def(kind).contract.encoded
    names = ", ".join(sensors)
    if want is None:
        raise ConfigError(f"decode: server, but a {kind} has no encoded input", key="decode", sensor=names)
    have = contract.input(want.name)
    why = f"it has no input {want.name}" if have is None else want.accepts(have)
    if why is not None:
        raise ConfigError(
            f"decode: server needs model {contract.name} to take the encoded image ({want.name} "
            f"{want.expected()}, optional), but {why}; set decode: client for {names} or serve a model that "
            "decodes",
            key="decode",
            sensor=names,
            model=contract.name,
        )
    if have is not None and not have.optional:
        raise ConfigError(
            f"model {contract.name}'s input {want.name} must be optional (a request sends it or the image)",
            key="decode",
            sensor=names,
            model=contract.name,
        )


def _tensor(entry: Mapping[str, Any], model: str) -> TensorSpec:
    try:
        return TensorSpec.from_config(entry)
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelContractError(f"malformed tensor entry in model config: {entry!r}: {exc}", model=model) from exc


def parse_model_config(config: Mapping[str, Any]) -> ModelContract:
    """The contract of a model from ``get_model_config(as_json=True)`` (with or without ``"config"``).

    Protobuf's JSON form omits zero/default fields (``max_batch_size: 0`` is absent) and renders
    int64 dims as strings; both are handled.
    """
    body: Mapping[str, Any] = config.get("config", config)
    name = str(body.get("name", ""))
    try:
        max_batch_size = int(body.get("max_batch_size", 0))
    except (TypeError, ValueError) as exc:
        raise ModelContractError(f"malformed max_batch_size {body.get('max_batch_size')!r}", model=name) from exc
    return ModelContract(
        name=name,
        max_batch_size=max_batch_size,
        inputs=tuple(_tensor(e, name) for e in body.get("input", ())),
        outputs=tuple(_tensor(e, name) for e in body.get("output", ())),
        instances=_instances(body.get("instance_group", ())),
        input_size=_input_size(body.get("parameters", {}), name),
    )


def _input_size(parameters: Any, model: str) -> tuple[int, int] | None:
    """``(width, height)`` from the config's :data:`CAMERA_INPUT_SIZE_KEYS` parameters, if both are set
    (validated by :func:`perception.kinds.camera_input_size`; a bad value is the served model's fault)."""
    try:
        return camera_input_size(parameters, model=model)
    except ConfigError as exc:
        raise ModelContractError(f"parameter {exc.key!r} {exc.message}", model=model) from exc


def _instances(groups: Any) -> int:
    """Execution instances of an ``instance_group`` list (JSON form: counts may be strings or absent)."""
    total = 0
    try:
        for group in groups:
            count = int(group.get("count", 1))
            total += count * max(1, len(group.get("gpus", ())))
    except (AttributeError, TypeError, ValueError):
        return 1  # not a contract matter: an odd entry only means a partial warm-up
    return max(1, total)
