"""Console sessions: one row per live session, so that signing out ends it server-side.

The row is found by the SHA-256 of the random session id in the cookie (the id
itself is never stored) and names the key and the hash of the secret that signed
in; ``web/auth.py`` re-checks that secret on every request.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, delete, insert, select

from execauth.store.tables import web_sessions


@dataclass(frozen=True, slots=True)
class WebSession:
    session_hash: str  # SHA-256 hex of the cookie's session id
    key_id: str
    secret_hash: str  # api_keys hash of the secret presented at sign-in
    created_at: datetime
    expires_at: datetime


class WebSessionStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def open_session(self, session: WebSession) -> None:
        """Record a new session (and drop the rows of sessions that have expired)."""
        with self.engine.begin() as conn:
            expired = web_sessions.c.expires_at <= session.created_at
            conn.execute(delete(web_sessions).where(expired))
            conn.execute(
                insert(web_sessions).values(
                    session_hash=session.session_hash,
                    key_id=session.key_id,
                    secret_hash=session.secret_hash,
                    created_at=session.created_at,
                    expires_at=session.expires_at,
                )
            )

    def live_session(self, session_hash: str, now: datetime) -> WebSession | None:
        """The session, unless it was ended or has expired."""
        query = select(web_sessions).where(
            web_sessions.c.session_hash == session_hash, web_sessions.c.expires_at > now
        )
        with self.engine.connect() as conn:
            row = conn.execute(query).mappings().first()
        return WebSession(**row) if row is not None else None

    def end_session(self, session_hash: str) -> None:
        """Sign-out: the session's cookie gets no page from now on, on every instance."""
        with self.engine.begin() as conn:
            conn.execute(delete(web_sessions).where(web_sessions.c.session_hash == session_hash))
