"""Type aliases for grpc.aio objects whose stubs are generic only at type-check time."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

import grpc

if TYPE_CHECKING:
    Context: TypeAlias = grpc.aio.ServicerContext[Any, Any]
    MethodHandler: TypeAlias = grpc.RpcMethodHandler[Any, Any]
    GenericHandler: TypeAlias = grpc.GenericRpcHandler[Any, Any]
else:
    Context = grpc.aio.ServicerContext
    MethodHandler = grpc.RpcMethodHandler
    GenericHandler = grpc.GenericRpcHandler
