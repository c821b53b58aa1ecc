"""execauth-client: ask the Execution Authorization Service for a decision, and verify
its signed receipt offline.

    from execauth_client import Client

    with Client("https://execauth.example", api_key) as client:
        receipt = client.require_permit("deploy.production", actor="release-bot",
                                        context={"branch": "main"})
        # only reached under an authentic, unexpired PERMIT for exactly this request
"""

from execauth_client.client import AsyncClient, Client
from execauth_client.errors import (
    ExecauthError,
    Forbidden,
    InvalidRequest,
    NotPermitted,
    QuotaExceeded,
    RateLimited,
    ReceiptNotUsable,
    ServiceUnavailable,
    SurfaceNotFound,
    Unauthorized,
    UnexpectedResponse,
    VerificationFailed,
)
from execauth_client.guard import guarded, require_permit
from execauth_client.intent import Intent, IntentCheck, IntentRefused, check_intent, require_intent
from execauth_client.receipt import Receipt
from execauth_client.verify import KeyList, KeyListError, PublicKey, Verdict, verify

__version__ = "0.1.0"

__all__ = [
    "AsyncClient",
    "Client",
    "ExecauthError",
    "Forbidden",
    "Intent",
    "IntentCheck",
    "IntentRefused",
    "InvalidRequest",
    "KeyList",
    "KeyListError",
    "NotPermitted",
    "PublicKey",
    "QuotaExceeded",
    "RateLimited",
    "Receipt",
    "ReceiptNotUsable",
    "ServiceUnavailable",
    "SurfaceNotFound",
    "Unauthorized",
    "UnexpectedResponse",
    "Verdict",
    "VerificationFailed",
    "check_intent",
    "guarded",
    "require_intent",
    "require_permit",
    "verify",
]
