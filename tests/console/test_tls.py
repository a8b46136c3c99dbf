"""Where the services speak mTLS, the console `egbe up` serves dials them over it: an operator's
sign-in (checked by a call to the gateway) and the pages' reads go through."""

from __future__ import annotations

import re

import httpx

from tests.conftest import EmbeddedEgbe


def test_the_console_of_an_mtls_egbe_up_signs_an_operator_in_through_the_gateway(
    mtls_egbe: EmbeddedEgbe,
) -> None:
    url = mtls_egbe.http["console"].rstrip("/")
    with httpx.Client(base_url=url, timeout=10) as client:
        signin = client.get("/signin")
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', signin.text)
        assert csrf is not None
        answer = client.post(
            "/signin",
            data={"csrf_token": csrf.group(1), "name": "ada", "token": mtls_egbe.tokens["operator"]},
            headers={"Origin": url},
        )
        assert (answer.status_code, answer.headers.get("location")) == (303, "/")
        worlds = client.get("/")
        assert worlds.status_code == 200
        assert "<h1>Worlds</h1>" in worlds.text
        controls = client.get("/controls")  # a ListControls over mTLS with ada's token
        assert controls.status_code == 200
        assert "<h1>Controls</h1>" in controls.text
