"""The plain-stack baseline: a minimal Starlette POST handler on uvicorn.

Served exactly as ``execauth serve`` serves (the same worker count, uvloop,
httptools, no access log), so the gap between this and execauth is what execauth itself costs.
It decodes the JSON body and answers a small JSON object: no auth, no policy, no
signature, no storage.

    python bench/baseline_app.py --port 8099 [--workers 2]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route


async def execute(request: Request) -> Response:
    body = json.loads(await request.body())
    return JSONResponse({"decision": "PERMIT", "surface": body.get("surface")})


async def readyz(request: Request) -> Response:
    return JSONResponse({"status": "ready"})


app = Starlette(
    routes=[
        Route("/v1/execute", execute, methods=["POST"]),
        Route("/readyz", readyz, methods=["GET"]),
    ]
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    uvicorn.run(
        # Several workers need an import string: each one imports this module anew.
        "baseline_app:app" if args.workers > 1 else app,
        app_dir=str(Path(__file__).parent),
        workers=args.workers,
        host=args.host,
        port=args.port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
        server_header=False,
    )


if __name__ == "__main__":
    main()
