"""Frame scheduler: time alignment, concurrent dispatch with a deadline join, pipelining, embedding APIs."""

from __future__ import annotations

from perception.scheduler._accumulate import SweepAccumulator
from perception.scheduler._admission import AdmissionProvider, RemoteAdmission, SharedAdmission
from perception.scheduler._align import AlignCore, AlignStats, FrameAssembler
from perception.scheduler._callbacks import CallbackQueue
from perception.scheduler._dispatch import InferClient
from perception.scheduler._lifetime import Lifetime, ThreadHost, hosted_in_task
from perception.scheduler._observer import RunObserver
from perception.scheduler._pipeline import CANCELLED_IN_FLIGHT, OrderedPipeline, failure_reason
from perception.scheduler._rig_check import RigCheck
from perception.scheduler._runtime import Runtime, abandoned_fusion_running, client_options, server_time_breakdown
from perception.scheduler._session import FusionStage, Session, TrackingStage
from perception.scheduler._shedding import OVERLOAD, Superseded, sheds
from perception.scheduler._tensors import camera_input, output_names, prepare_inputs, scale_camera_boxes
from perception.scheduler._thread import ThreadedRuntime

__all__ = [
    "CANCELLED_IN_FLIGHT",
    "OVERLOAD",
    "AdmissionProvider",
    "AlignCore",
    "AlignStats",
    "CallbackQueue",
    "FrameAssembler",
    "FusionStage",
    "InferClient",
    "Lifetime",
    "OrderedPipeline",
    "RemoteAdmission",
    "RigCheck",
    "RunObserver",
    "Runtime",
    "Session",
    "SharedAdmission",
    "Superseded",
    "SweepAccumulator",
    "ThreadHost",
    "ThreadedRuntime",
    "TrackingStage",
    "abandoned_fusion_running",
    "camera_input",
    "client_options",
    "failure_reason",
    "hosted_in_task",
    "output_names",
    "prepare_inputs",
    "scale_camera_boxes",
    "server_time_breakdown",
    "sheds",
]
