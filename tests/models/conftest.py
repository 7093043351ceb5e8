"""Shared fixtures of the model tests: a plain sync gRPC client of the session's embedded Triton."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import tritonclient.grpc as grpcclient

from perception.server import EmbeddedTriton


@pytest.fixture(scope="module")
def client(triton: EmbeddedTriton) -> Iterator[grpcclient.InferenceServerClient]:
    c = grpcclient.InferenceServerClient(triton.grpc_url)
    try:
        yield c
    finally:
        c.close()
