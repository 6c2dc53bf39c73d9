#!/usr/bin/env python3
"""An MCP server that signs its callers in with OAuth, for the e2e tests of
a worker's sign-in: the official `mcp` SDK's server with the SDK's own
authorization-server pieces (`MCPServer(auth_server_provider=...)`: its
metadata, registration, authorize and token endpoints), over a provider
kept in memory that approves every authorization at once.

Its tokens last TOKEN_SECONDS (default 3600), and refresh tokens rotate: a
refresh token that was used once is refused (`invalid_grant`) when used
again, as an authorization server that detects reuse does. Each event is a
JSON line in the file LOG: `login`, `refresh`, `reused` (a rotated refresh
token came back) and `call` (the tool `whoami`). With REVOKE_AFTER_CALLS=N,
the Nth call revokes every token issued so far, refresh tokens included, as
an administrator who ends a sign-in does. It says `listening <url>` on
stderr once it serves.
"""

import json
import os
import secrets
import socket
import sys
import time

from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

LOG = os.environ.get("LOG", os.devnull)
TOKEN_SECONDS = int(os.environ.get("TOKEN_SECONDS", "3600"))
REVOKE_AFTER_CALLS = int(os.environ.get("REVOKE_AFTER_CALLS", "0"))


def note(event: str, **fields: object) -> None:
    with open(LOG, "a", encoding="utf-8") as log:
        log.write(json.dumps({"event": event, "at": time.time(), **fields}) + "\n")


class Provider:
    """Clients, codes and tokens in memory; every authorization approved."""

    def __init__(self) -> None:
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.rotated: set[str] = set()

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        code = "code-" + secrets.token_hex(16)
        self.codes[code] = AuthorizationCode(
            code=code, scopes=params.scopes or [], expires_at=time.time() + 300,
            client_id=client.client_id or "", code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource)
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(self, client: OAuthClientInformationFull,
                                      authorization_code: str) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    def issue(self, client_id: str, scopes: list[str], resource: str | None) -> OAuthToken:
        access = "tok-" + secrets.token_hex(16)
        refresh = "ref-" + secrets.token_hex(16)
        self.access[access] = AccessToken(token=access, client_id=client_id, scopes=scopes,
                                          expires_at=int(time.time()) + TOKEN_SECONDS,
                                          resource=resource)
        self.refresh[refresh] = RefreshToken(token=refresh, client_id=client_id, scopes=scopes,
                                             resource=resource)
        return OAuthToken(access_token=access, expires_in=TOKEN_SECONDS,
                          scope=" ".join(scopes), refresh_token=refresh)

    async def exchange_authorization_code(self, client: OAuthClientInformationFull,
                                          authorization_code: AuthorizationCode) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)
        note("login", scopes=authorization_code.scopes)
        return self.issue(authorization_code.client_id, authorization_code.scopes,
                          authorization_code.resource)

    async def load_refresh_token(self, client: OAuthClientInformationFull,
                                 refresh_token: str) -> RefreshToken | None:
        if refresh_token in self.rotated:
            note("reused")
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(self, client: OAuthClientInformationFull,
                                     refresh_token: RefreshToken, scopes: list[str]) -> OAuthToken:
        self.refresh.pop(refresh_token.token, None)
        self.rotated.add(refresh_token.token)
        note("refresh")
        return self.issue(refresh_token.client_id, scopes or refresh_token.scopes,
                          refresh_token.resource)

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < time.time()):
            return None
        return found

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)


def main() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    provider = Provider()
    server = MCPServer(
        "oauth-tools",
        auth_server_provider=provider,
        auth=AuthSettings(
            issuer_url=base,
            resource_server_url=f"{base}/mcp",
            required_scopes=["tools"],
            validate_token_resource=True,
            client_registration_options=ClientRegistrationOptions(
                enabled=True, valid_scopes=["tools"], default_scopes=["tools"]),
        ),
    )

    calls = 0

    @server.tool()
    def whoami() -> str:
        """Says that the caller is signed in."""
        nonlocal calls
        calls += 1
        note("call")
        if calls == REVOKE_AFTER_CALLS:
            provider.access.clear()
            provider.refresh.clear()
            note("revoked")
        return "signed in"

    print(f"listening {base}/mcp", file=sys.stderr, flush=True)
    server.run("streamable-http", host="127.0.0.1", port=port)


if __name__ == "__main__":
    sys.exit(main())
