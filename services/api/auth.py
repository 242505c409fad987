"""Who is calling: the Caller of each request, from an API key or an OIDC bearer token, and the
role checks of routes.

Routes depend only on `CurrentCaller` and `require_role`. With auth enabled (the default) every
route that uses them needs `Authorization: Bearer <credential>`: an orgmem API key (`om_...`) or,
when an issuer is configured, a JWT signed by a key in the issuer's JWKS. Missing or bad
credentials answer 401, a role too low 403, too many requests 429; each as problem details.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from services.api.problems import ApiProblem
from services.api.ratelimit import RateLimiter, storage_url
from services.core.caller import Caller
from services.core.keys import check_name
from services.errors import BackendUnavailable, KeyRequestError, OrgmemError
from services.ports import KeyStore

ROLE_RANK = {"reader": 0, "writer": 1, "admin": 2}
_BEARER = HTTPBearer(auto_error=False, description="An orgmem API key (om_...) or an OIDC access token")


def unauthorized(detail: str) -> ApiProblem:
    return ApiProblem(401, "Unauthorized", detail, "unauthorized", {"WWW-Authenticate": 'Bearer realm="orgmem"'})


class OidcVerifier:
    """Verifies bearer JWTs against the issuer's JWKS (PyJWT); claims name tenant, principal, groups, role."""

    def __init__(self, auth):
        import jwt

        if not auth.oidc_audience:
            raise OrgmemError("auth.oidc_audience: required with auth.oidc_issuer (tokens for other audiences must fail)")
        bad = [a for a in auth.oidc_algorithms if a.lower() == "none" or a.upper().startswith("HS")]
        if bad:
            raise OrgmemError(f"auth.oidc_algorithms: {bad} not allowed; use asymmetric algorithms (RS256, ES256, ...)")
        self.auth, self._jwt = auth, jwt
        self._jwks = jwt.PyJWKClient(auth.oidc_jwks_url, cache_keys=True, lifespan=300, timeout=5) if auth.oidc_jwks_url else None

    def _client(self):
        if self._jwks is None:  # discovery, once: the issuer publishes where its keys are
            import httpx

            url = self.auth.oidc_issuer.rstrip("/") + "/.well-known/openid-configuration"
            try:
                jwks_uri = httpx.get(url, timeout=5).raise_for_status().json()["jwks_uri"]
            except (httpx.HTTPError, ValueError, KeyError) as exc:
                raise BackendUnavailable("oidc issuer", f"discovery failed: {type(exc).__name__}") from None
            self._jwks = self._jwt.PyJWKClient(jwks_uri, cache_keys=True, lifespan=300, timeout=5)
        return self._jwks

    def caller(self, token: str) -> Caller:
        jwt, auth = self._jwt, self.auth
        try:
            signing_key = self._client().get_signing_key_from_jwt(token)
        except jwt.PyJWKClientConnectionError:
            raise BackendUnavailable("oidc jwks", "the issuer's key set cannot be fetched") from None
        except (jwt.PyJWKClientError, jwt.InvalidTokenError):
            raise unauthorized("bearer token: not signed by a key of the configured issuer") from None
        try:
            claims = jwt.decode(token, signing_key.key, algorithms=auth.oidc_algorithms, audience=auth.oidc_audience,
                                issuer=auth.oidc_issuer, leeway=auth.oidc_leeway_s,
                                options={"require": ["exp", "iss", "aud"]})
        except jwt.ExpiredSignatureError:
            raise unauthorized("bearer token: expired") from None
        except jwt.InvalidTokenError as exc:  # the class name says which check failed, nothing more
            raise unauthorized(f"bearer token: rejected ({type(exc).__name__})") from None
        tenant = claims.get(auth.tenant_claim, auth.oidc_default_tenant)
        principal = claims.get(auth.principal_claim)
        groups = claims.get(auth.groups_claim) or []
        groups = [groups] if isinstance(groups, str) else groups
        role = claims.get(auth.role_claim) or auth.oidc_default_role
        if isinstance(role, list):  # a roles array: the highest orgmem role it names
            role = max((r for r in role if r in ROLE_RANK), key=ROLE_RANK.get, default=auth.oidc_default_role)
        try:
            check_name(auth.tenant_claim, tenant)
            check_name(auth.principal_claim, principal)
            if not isinstance(groups, list):
                raise KeyRequestError(f"{auth.groups_claim}: not a list")
            for group in groups:
                check_name(auth.groups_claim, group)
        except KeyRequestError as exc:
            raise unauthorized(f"bearer token: claim {exc}") from None
        if role not in ROLE_RANK:
            raise unauthorized(f"bearer token: claim {auth.role_claim}: unknown role")
        readers = frozenset({principal.lower(), *(g.lower() for g in groups)})
        return Caller(tenant=tenant, readers=readers, name=f"oidc:{principal}", role=role)


class Authenticator:
    def __init__(self, settings, keys: KeyStore | None):
        auth = settings.auth
        self.enabled, self.keys = auth.enabled, keys
        self.oidc = OidcVerifier(auth) if auth.enabled and auth.oidc_issuer else None
        storage = storage_url(settings)
        self.limiter = RateLimiter(auth.rate_limit, storage, "orgmem-caller")
        self.failures = RateLimiter(auth.failed_auth_limit, storage, "orgmem-auth-failure")

    def _rejected(self, client: str, problem: ApiProblem) -> ApiProblem:
        self.failures.hit(client)
        return problem

    def authenticate(self, token: str | None, client: str) -> tuple[Caller, str]:
        """The caller and its rate-limit identity; raises ApiProblem for 401 and 429."""
        if not token:
            raise unauthorized("credentials: send 'Authorization: Bearer <API key or token>'")
        key = self.keys.verify(token, cached_only=True) if self.keys and token.startswith("om_") else None
        if key is not None:  # a key that verified before costs no hash, and is never blocked
            return key.caller(), f"key:{key.key_id}"
        # Checked before any hash or JWKS fetch, so a flood of bad credentials costs little; behind a
        # proxy all clients share one address, hence the exemption of known keys above.
        if not self.failures.test(client):
            raise ApiProblem(429, "Too many failed attempts", "credentials: too many failed attempts from this "
                             "address; wait and retry", "rate-limited", {"Retry-After": "60"})
        if token.startswith("om_"):
            key = self.keys.verify(token) if self.keys else None
            if key is None:
                raise self._rejected(client, unauthorized("credentials: unknown or revoked API key"))
            return key.caller(), f"key:{key.key_id}"
        if self.oidc is not None and token.count(".") == 2:
            try:
                caller = self.oidc.caller(token)
            except ApiProblem as problem:
                raise self._rejected(client, problem) from None
            return caller, f"oidc:{caller.tenant}:{caller.name}"
        raise self._rejected(client, unauthorized("credentials: not an orgmem API key" +
                                                  (" or a JWT" if self.oidc else "")))

    def admit(self, identity: str) -> None:
        verdict = self.limiter.hit(identity)
        if not verdict.allowed:
            raise ApiProblem(429, "Too many requests", f"rate limit {verdict.limit} reached; retry in "
                             f"{verdict.retry_after_s} s", "rate-limited", {"Retry-After": str(verdict.retry_after_s)})


def current_caller(request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)]) -> Caller:
    authenticator: Authenticator | None = getattr(request.app.state.orgmem, "auth", None)
    if authenticator is None or not authenticator.enabled:
        return Caller()  # auth disabled: the embedded profile's single admin of the default tenant
    client = request.client.host if request.client else "unknown"
    caller, identity = authenticator.authenticate(credentials.credentials if credentials else None, client)
    authenticator.admit(identity)
    return caller


CurrentCaller = Annotated[Caller, Depends(current_caller)]


def require_role(role: str):
    """A dependency that admits callers with at least `role` (reader < writer < admin)."""

    def check(caller: CurrentCaller) -> Caller:
        if ROLE_RANK.get(caller.role, -1) < ROLE_RANK[role]:
            raise ApiProblem(403, "Forbidden", f"this route needs the {role} role; the caller has {caller.role}",
                             "forbidden")
        return caller

    return check
