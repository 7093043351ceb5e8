"""Frame scheduler: time alignment, concurrent dispatch with a deadline join, pipelining, embedding APIs."""

from __future__ import annotations

from perception.scheduler._accumulate import SweepAccumulator
from perception.scheduler._admission import AdmissionProvider, RemoteAdmission, SharedAdmission
from perception.scheduler._align import FrameAssembler
from perception.scheduler._callbacks import CallbackQueue
from perception.scheduler._dispatch import InferClient
from perception.scheduler._pipeline import OrderedPipeline
from perception.scheduler._runtime import Runtime, client_options, server_time_breakdown
from perception.scheduler._session import FusionStage, Session
from perception.scheduler._shedding import OVERLOAD
from perception.scheduler._tensors import camera_input, output_names, prepare_inputs, scale_camera_boxes
from perception.scheduler._thread import ThreadedRuntime

__all__ = [
    "OVERLOAD",
    "AdmissionProvider",
    "CallbackQueue",
    "FrameAssembler",
    "FusionStage",
    "InferClient",
    "OrderedPipeline",
    "RemoteAdmission",
    "Runtime",
    "Session",
    "SharedAdmission",
    "SweepAccumulator",
    "ThreadedRuntime",
    "camera_input",
    "client_options",
    "output_names",
    "prepare_inputs",
    "scale_camera_boxes",
    "server_time_breakdown",
]
