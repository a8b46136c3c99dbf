"""CognitionService over gRPC: validate, run the pipeline, map errors."""

from __future__ import annotations

from egbe.v1 import cognition_pb2, cognition_pb2_grpc
from services.auth import Role
from services.errors import NotBuilt
from services.grpc_types import Context

METHOD_ROLES = {
    cognition_pb2.DESCRIPTOR.services_by_name["CognitionService"].full_name: {
        "Think": frozenset({Role.SERVICE}),
    }
}


class CognitionServicer(cognition_pb2_grpc.CognitionServiceServicer):
    async def Think(
        self, request: cognition_pb2.ThinkRequest, context: Context
    ) -> cognition_pb2.ThinkResponse:
        raise NotBuilt("the cognition pipeline (issue #6)")
