"""Console sign-in and sessions: what the cookie holds, who may sign in, CSRF, sign-out,
and how rotating or revoking the key that signed in ends its sessions."""

from __future__ import annotations

import base64
import json
from datetime import timedelta

import httpx
import pytest

from tests.operator.conftest import Operators
from tests.web.conftest import Clock, Console, csrf_of, secret_of, sign_in

pytestmark = pytest.mark.anyio
SESSION = "execauth_console"


def restore(client: httpx.AsyncClient, cookie: str) -> None:
    """Put a saved session cookie back, as someone who copied it would."""
    client.cookies.set(SESSION, cookie, domain="execauth.test")


async def rotate(console: Console, grace_seconds: int) -> str:
    """Rotate the signed-in admin key through the JSON API; returns the new secret."""
    response = await console.client.post(
        f"/operator/keys/{console.ops.admin_key_id}/rotate",
        json={"grace_seconds": grace_seconds},
        headers=console.ops.admin,
    )
    assert response.status_code == 200, response.text
    secret: str = response.json()["api_key"]
    return secret


async def rotate_in_console(console: Console, grace_seconds: int) -> httpx.Response:
    """Rotate the signed-in admin key with the console's own form."""
    path = f"/console/keys/{console.ops.admin_key_id}/rotate"
    return await console.post(path, {"grace_seconds": str(grace_seconds)})


async def key_names(console: Console) -> list[str]:
    keys = await console.client.get("/operator/keys", headers=console.ops.auditor)
    assert keys.status_code == 200, keys.text
    return [key["name"] for key in keys.json()["keys"]]


async def test_login_sets_an_httponly_strict_secure_cookie_without_the_key(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    response = await sign_in(client, secret_of(ops.admin))
    assert response.status_code == 303
    assert response.headers["location"] == "/console/executions"
    cookie = next(
        c for c in response.headers.get_list("set-cookie") if c.startswith("execauth_console=")
    )
    attributes = [a.strip().lower() for a in cookie.split(";")]
    assert "httponly" in attributes
    assert "samesite=strict" in attributes
    assert "secure" in attributes  # the test client speaks https
    assert secret_of(ops.admin) not in cookie
    assert secret_of(ops.admin)[13:] not in cookie


async def test_a_signed_in_admin_sees_the_timeline(console: Console) -> None:
    page = await console.client.get("/console/executions")
    assert page.status_code == 200
    assert "Executions" in page.text
    assert "Sign out" in page.text


async def test_an_auditor_can_sign_in(client: httpx.AsyncClient, ops: Operators) -> None:
    assert (await sign_in(client, secret_of(ops.auditor))).status_code == 303
    assert (await client.get("/console/executions")).status_code == 200


async def test_a_wrong_key_cannot_sign_in(client: httpx.AsyncClient, ops: Operators) -> None:
    response = await sign_in(client, "service_live_" + "A" * 49)
    assert response.status_code == 401
    assert "execauth_console=" not in response.headers.get("set-cookie", "")
    assert (await client.get("/console/executions")).status_code == 303


async def test_an_execute_key_cannot_sign_in(client: httpx.AsyncClient, ops: Operators) -> None:
    response = await sign_in(client, ops.tenant.api_key)
    assert response.status_code == 403
    assert "admin or auditor" in response.text
    assert "execauth_console=" not in response.headers.get("set-cookie", "")
    assert ops.tenant.api_key not in response.text


async def test_a_revoked_key_cannot_sign_in(client: httpx.AsyncClient, ops: Operators) -> None:
    revoked = await client.delete(f"/operator/keys/{ops.admin_key_id}", headers=ops.admin)
    assert revoked.status_code == 204
    assert (await sign_in(client, secret_of(ops.admin))).status_code == 401


async def test_a_revoked_keys_session_stops_working(console: Console) -> None:
    assert (await console.client.get("/console/keys")).status_code == 200
    revoked = await console.client.delete(
        f"/operator/keys/{console.ops.admin_key_id}", headers=console.ops.auditor | {}
    )
    assert revoked.status_code == 403  # auditors cannot revoke; use the admin's own key
    revoked = await console.client.delete(
        f"/operator/keys/{console.ops.admin_key_id}", headers=console.ops.admin
    )
    assert revoked.status_code == 204
    page = await console.client.get("/console/keys")
    assert page.status_code == 303
    assert page.headers["location"] == "/console/login"
    post = await console.client.post("/console/keys", data={"csrf_token": "x", "name": "n"})
    assert post.status_code == 401


async def test_a_post_without_a_csrf_token_is_403(console: Console) -> None:
    response = await console.client.post("/console/keys", data={"name": "sneaky"})
    assert response.status_code == 403
    keys = await console.client.get("/operator/keys", headers=console.ops.admin)
    assert "sneaky" not in keys.text


async def test_a_post_with_a_wrong_csrf_token_is_403(console: Console) -> None:
    token = await console.csrf()
    wrong = ("0" if token[0] != "0" else "1") + token[1:]
    response = await console.client.post("/console/keys", data={"csrf_token": wrong, "name": "x"})
    assert response.status_code == 403
    replay = await console.client.post(
        "/console/executions/service_exec_00000000000000000000000000/replay",
        data={"csrf_token": wrong},
    )
    assert replay.status_code == 403


async def test_sign_in_without_its_csrf_token_is_403(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    await client.get("/console/login")
    response = await client.post("/console/login", data={"api_key": secret_of(ops.admin)})
    assert response.status_code == 403


async def test_another_sessions_csrf_token_is_refused(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    await sign_in(client, secret_of(ops.admin))
    first = csrf_of((await client.get("/console/keys")).text)
    client.cookies.clear()
    await sign_in(client, secret_of(ops.admin))  # a new session, a new token
    response = await client.post("/console/keys", data={"csrf_token": first, "name": "x"})
    assert response.status_code == 403


async def test_a_tampered_session_cookie_is_refused(console: Console) -> None:
    cookie = console.client.cookies["execauth_console"]
    body, tag = cookie.split(".")
    console.client.cookies.set(
        "execauth_console", body + "." + ("A" if tag[0] != "A" else "B") + tag[1:],
        domain="execauth.test",
    )  # fmt: skip
    assert (await console.client.get("/console/keys")).status_code == 303


async def test_sign_out_ends_the_session(console: Console) -> None:
    token = await console.csrf()
    response = await console.client.post("/console/logout", data={"csrf_token": token})
    assert response.status_code == 303
    cleared = response.headers["set-cookie"]
    assert cleared.startswith("execauth_console=")
    assert "max-age=0" in cleared.lower()
    assert (await console.client.get("/console/executions")).status_code == 303


async def test_the_console_needs_a_session(client: httpx.AsyncClient) -> None:
    response = await client.get("/console/executions")
    assert response.status_code == 303
    assert response.headers["location"] == "/console/login"


async def test_the_session_cookie_holds_only_a_session_id_and_its_expiry(console: Console) -> None:
    body = console.client.cookies[SESSION].split(".")[0]
    claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    assert set(claims) == {"session_id", "expires"}


async def test_a_session_ends_after_eight_hours(console: Console, clock: Clock) -> None:
    clock.now += timedelta(hours=8)
    assert (await console.client.get("/console/executions")).status_code == 303


# --- sign-out ends the session on the server ------------------------------------------------


async def test_a_cookie_saved_before_sign_out_gets_no_page_after_it(console: Console) -> None:
    saved = console.client.cookies[SESSION]
    await console.post("/console/logout", {})
    restore(console.client, saved)
    page = await console.client.get("/console/executions")
    assert page.status_code == 303
    assert page.headers["location"] == "/console/login"


async def test_a_cookie_saved_before_sign_out_cannot_post(console: Console) -> None:
    saved, token = console.client.cookies[SESSION], await console.csrf()
    await console.client.post("/console/logout", data={"csrf_token": token})
    restore(console.client, saved)
    response = await console.client.post("/console/keys", data={"csrf_token": token, "name": "z"})
    assert response.status_code == 401
    assert "z" not in await key_names(console)


async def test_a_csrf_token_from_before_signing_in_again_is_refused(console: Console) -> None:
    old = await console.csrf()
    await console.client.post("/console/logout", data={"csrf_token": old})
    await sign_in(console.client, secret_of(console.ops.admin))
    assert await console.csrf() != old
    response = await console.client.post("/console/keys", data={"csrf_token": old, "name": "x"})
    assert response.status_code == 403


# --- a session lives no longer than the secret that opened it ---------------------------------


async def test_rotating_with_no_grace_ends_the_old_secrets_session(console: Console) -> None:
    await rotate(console, grace_seconds=0)
    page = await console.client.get("/console/executions")
    assert page.status_code == 303
    assert page.headers["location"] == "/console/login"


async def test_an_old_secrets_session_cannot_post_after_a_rotation_with_no_grace(
    console: Console,
) -> None:
    token = await console.csrf()
    await rotate(console, grace_seconds=0)
    issue = await console.client.post(
        "/console/keys", data={"csrf_token": token, "name": "late", "role": "admin"}
    )
    assert issue.status_code == 401
    assert "late" not in await key_names(console)


async def test_an_old_secrets_session_works_during_the_grace(
    console: Console, clock: Clock
) -> None:
    await rotate(console, grace_seconds=600)
    clock.now += timedelta(seconds=599)
    assert (await console.client.get("/console/executions")).status_code == 200


async def test_an_old_secrets_session_ends_with_the_grace(console: Console, clock: Clock) -> None:
    await rotate(console, grace_seconds=600)
    clock.now += timedelta(seconds=600)
    assert (await console.client.get("/console/executions")).status_code == 303


async def test_rotating_again_ends_the_first_secrets_session_within_its_grace(
    console: Console,
) -> None:
    await rotate(console, grace_seconds=3600)
    await rotate(console, grace_seconds=3600)  # only one rotated-out secret is kept
    assert (await console.client.get("/console/executions")).status_code == 303


async def test_a_session_of_the_new_secret_outlives_the_old_secrets_grace(
    console: Console, clock: Clock
) -> None:
    new_secret = await rotate(console, grace_seconds=600)
    console.client.cookies.clear()
    assert (await sign_in(console.client, new_secret)).status_code == 303
    clock.now += timedelta(seconds=601)
    assert (await console.client.get("/console/executions")).status_code == 200


async def test_rotating_the_signed_in_key_in_the_console_shows_its_secret_then_ends_the_session(
    console: Console,
) -> None:
    rotated = await rotate_in_console(console, grace_seconds=0)
    assert rotated.status_code == 200
    assert "service_live_" in rotated.text
    assert (await console.client.get("/console/keys")).status_code == 303


async def test_rotating_the_signed_in_key_in_the_console_says_the_session_will_end(
    console: Console,
) -> None:
    rotated = await rotate_in_console(console, grace_seconds=600)
    assert "You are signed in with this key" in rotated.text


async def test_revoking_the_key_ends_a_session_of_its_rotated_out_secret(console: Console) -> None:
    new_secret = await rotate(console, grace_seconds=3600)
    revoked = await console.client.delete(
        f"/operator/keys/{console.ops.admin_key_id}",
        headers={"Authorization": f"Bearer {new_secret}"},
    )
    assert revoked.status_code == 204
    assert (await console.client.get("/console/executions")).status_code == 303


async def test_a_non_ascii_csrf_token_at_sign_in_is_403(
    client: httpx.AsyncClient, ops: Operators
) -> None:
    await client.get("/console/login")  # sets the double-submit cookie
    response = await client.post(
        "/console/login", data={"csrf_token": "ünïcödé", "api_key": secret_of(ops.admin)}
    )
    assert response.status_code == 403
    assert "CSRF" in response.text


async def test_a_non_ascii_csrf_token_on_a_console_form_is_403(console: Console) -> None:
    response = await console.client.post("/console/keys", data={"csrf_token": "☃", "name": "x"})
    assert response.status_code == 403
    assert "x" not in await key_names(console)
