"""The app of one worker process under ``execauth serve --workers N``.

uvicorn starts each worker in a fresh interpreter and calls ``worker_app`` there.
The parent has already prepared the database (migrations, signing key, admin
token), so a worker only opens it; settings come from the same environment and
configuration file, and the parent passes what it took from its command line in
``EXECAUTH_SERVE_SURFACES``, where its writer process listens in
``EXECAUTH_WRITER_SOCKET``, and the file of the workers' shared change counter
(``execauth.serving.shared_generation``) in ``EXECAUTH_SHARED_GENERATION``, and the
directory where workers claim their numbers (``ps``: ``execauth: gateway 2/4``) in
``EXECAUTH_WORKER_SLOTS``. uvicorn has configured this process's logging already, from
``execauth.observability.logs.logging_config`` (its ``log_config``).
"""

from __future__ import annotations

import logging
import os

from starlette.applications import Starlette

from execauth.api.app import SURFACES, create_app
from execauth.config import Settings
from execauth.observability.logs import claim_worker_slot, name_process
from execauth.serving.runtime import freeze_startup_objects, open_runtime
from execauth.serving.shared_generation import SharedGeneration

SURFACES_VARIABLE = "EXECAUTH_SERVE_SURFACES"
WRITER_SOCKET_VARIABLE = "EXECAUTH_WRITER_SOCKET"
SHARED_GENERATION_VARIABLE = "EXECAUTH_SHARED_GENERATION"
WORKER_SLOTS_VARIABLE = "EXECAUTH_WORKER_SLOTS"


def worker_app() -> Starlette:
    settings = Settings()
    slot = claim_worker_slot(os.environ[WORKER_SLOTS_VARIABLE])
    name_process(f"gateway {slot}/{settings.workers}")
    logging.captureWarnings(True)
    chosen = os.environ.get(SURFACES_VARIABLE, ",".join(SURFACES)).split(",")
    runtime = open_runtime(settings, writer_socket=os.environ[WRITER_SOCKET_VARIABLE])
    shared = SharedGeneration(os.environ[SHARED_GENERATION_VARIABLE])
    app = create_app(runtime, surfaces=tuple(chosen), shared_generation=shared)
    freeze_startup_objects()
    return app
