"""The app of one worker process under ``execauth serve --workers N``.

uvicorn starts each worker in a fresh interpreter and calls ``worker_app`` there.
The parent has already prepared the database (migrations, signing key, admin
token), so a worker only opens it; settings come from the same environment and
configuration file, and the parent passes what it took from its command line in
``EXECAUTH_SERVE_SURFACES``, where its writer process listens in
``EXECAUTH_WRITER_SOCKET``, and the file of the workers' shared change counter
(``execauth.shared_generation``) in ``EXECAUTH_SHARED_GENERATION``.
"""

from __future__ import annotations

import os

from starlette.applications import Starlette

from execauth.api.app import SURFACES, create_app
from execauth.config import Settings
from execauth.runtime import open_runtime
from execauth.shared_generation import SharedGeneration

SURFACES_VARIABLE = "EXECAUTH_SERVE_SURFACES"
WRITER_SOCKET_VARIABLE = "EXECAUTH_WRITER_SOCKET"
SHARED_GENERATION_VARIABLE = "EXECAUTH_SHARED_GENERATION"


def worker_app() -> Starlette:
    settings = Settings()
    chosen = os.environ.get(SURFACES_VARIABLE, ",".join(SURFACES)).split(",")
    runtime = open_runtime(settings, writer_socket=os.environ[WRITER_SOCKET_VARIABLE])
    shared = SharedGeneration(os.environ[SHARED_GENERATION_VARIABLE])
    return create_app(runtime, surfaces=tuple(chosen), shared_generation=shared)
