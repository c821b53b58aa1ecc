"""Proofs from the Merkle logs (docs/ledger.md, "Endpoints"): inclusion, consistency, checkpoints.

Any key of the organization may read its own log; proofs reveal hashes only.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from execauth.api.pagination import MAX_BIGINT, required_query_int
from execauth.api.wire import json_response
from execauth.errors import InvalidRequest, NotFound
from execauth.serving.runtime import Runtime
from execauth.store.ledger import StoredCheckpoint
from execauth.usecases.execute import ExecutionService

PENDING_RETRY_SECONDS = 1


def ledger_routes(
    runtime: Runtime, service: ExecutionService, surfaces: Sequence[str]
) -> list[BaseRoute]:
    """The proof route on the gateway surface, the log routes on the operator surface.

    ``service`` authenticates the caller; the logs are read from ``runtime``'s stores.
    """
    logs = runtime.logs

    async def org_of(request: Request) -> str:
        caller = await service.authenticate(request.headers.get("authorization"))
        return caller.org.org_id

    async def latest(org_id: str) -> StoredCheckpoint:
        checkpoint = await anyio.to_thread.run_sync(logs.latest_checkpoint, org_id)
        if checkpoint is None:
            raise NotFound("this organization's log is empty")
        return checkpoint

    async def receipt_proof(request: Request) -> Response:
        org_id = await org_of(request)
        receipt_id = request.path_params["receipt_id"]
        execution_id = await anyio.to_thread.run_sync(
            runtime.executions.execution_of_receipt, org_id, receipt_id
        )
        if execution_id is None:
            raise NotFound("no such receipt in this organization")
        position = await anyio.to_thread.run_sync(logs.position, org_id, execution_id)
        if position is None:
            return json_response(
                {"status": "pending"}, 202, {"Retry-After": str(PENDING_RETRY_SECONDS)}
            )
        checkpoint = await latest(org_id)
        path = await anyio.to_thread.run_sync(
            logs.inclusion_path, org_id, position.log_index, checkpoint.tree_size
        )
        return json_response(
            {
                "receipt_id": receipt_id,
                "log_index": position.log_index,
                "tree_size": checkpoint.tree_size,
                "leaf_hash": position.leaf_hash.hex(),
                "inclusion_path": [node.hex() for node in path],
                "checkpoint": checkpoint.note,
            }
        )

    async def log_checkpoint(request: Request) -> Response:
        checkpoint = await latest(await org_of(request))
        return json_response(
            {
                "checkpoint": checkpoint.note,
                "tree_size": checkpoint.tree_size,
                "root_hash": checkpoint.root_hash.hex(),
            }
        )

    async def log_consistency(request: Request) -> Response:
        org_id = await org_of(request)
        checkpoint = await latest(org_id)
        first, second = (
            required_query_int(request, name, minimum=0, maximum=MAX_BIGINT)
            for name in ("from", "to")
        )
        if not 1 <= first <= second <= checkpoint.tree_size:
            raise InvalidRequest(
                f"need 1 <= from <= to <= {checkpoint.tree_size} (the latest tree size)"
            )
        path = await anyio.to_thread.run_sync(logs.consistency_path, org_id, first, second)
        return json_response(
            {"from": first, "to": second, "consistency_path": [node.hex() for node in path]}
        )

    routes: list[BaseRoute] = []
    if "gateway" in surfaces:
        routes.append(Route("/v1/receipts/{receipt_id}/proof", receipt_proof, methods=["GET"]))
    if "operator" in surfaces:
        routes.append(Route("/operator/log/checkpoint", log_checkpoint, methods=["GET"]))
        routes.append(Route("/operator/log/consistency", log_consistency, methods=["GET"]))
    return routes
