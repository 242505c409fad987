"""Who is calling: the Caller of each request, from an API key or an OIDC bearer token, and the
role checks of routes.

Routes depend only on `CurrentCaller` and `require_role`. With auth enabled (the default) every
route that uses them needs `Authorization: Bearer <credential>`: an orgmem API key (`om_...`) or,
when an issuer is configured, a JWT signed by a key in the issuer's JWKS. Missing or bad
credentials answer 401, a role too low 403, too many requests 429; each as problem details.

Failed credentials count against two buckets, the client address and the presented credential
(a key id, or a hash of any other token); over either, failures answer 429. Only failures count,
and a credential that verifies is never refused by them: over a limit its verification is only
queued behind a few slots, so a flood costs a bounded number of threads. The client address is
the peer's, or what X-Forwarded-For / Forwarded say when the peer is a configured trusted proxy.
Each caller may have `limits.max_in_flight_per_caller` requests in flight at once.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from services.api.problems import ApiProblem
from services.api.ratelimit import InFlight, RateLimiter, storage_url
from services.core.caller import Caller
from services.core.keys import check_name, key_id_of
from services.core.scope import reader_tokens_for
from services.errors import BackendUnavailable, KeyRequestError, OrgmemError
from services.ports import KeyStore

ROLE_RANK = {"reader": 0, "writer": 1, "admin": 2}
_BEARER = HTTPBearer(auto_error=False, description="An orgmem API key (om_...) or an OIDC access token")


def unauthorized(detail: str) -> ApiProblem:
    return ApiProblem(401, "Unauthorized", detail, "unauthorized", {"WWW-Authenticate": 'Bearer realm="orgmem"'})


def credential_id(token: str) -> str:
    """What failures of a presented credential count against: its key id, or a hash of the token."""
    key_id = key_id_of(token)
    return f"key:{key_id}" if key_id else "token:" + hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()[:32]


def _address(value: str) -> str | None:
    """An address from a header value ("1.2.3.4", "1.2.3.4:80", "[::1]:80", '"[::1]"'), normalised."""
    value = value.strip().strip('"')
    if value.startswith("["):
        value = value[1:].split("]", 1)[0]
    elif value.count(":") == 1:
        value = value.split(":", 1)[0]
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        return None


class TrustedProxies:
    """Peers whose forwarded headers name the client (auth.trusted_proxies); nobody by default."""

    def __init__(self, entries: list[str]):
        try:
            self.networks = [ipaddress.ip_network(entry.strip(), strict=False) for entry in entries]
        except ValueError as exc:
            raise OrgmemError(f"auth.trusted_proxies: {exc}") from None

    def trusts(self, address: str | None) -> bool:
        ip = _address(address) if address else None
        return ip is not None and any(ipaddress.ip_address(ip) in network for network in self.networks)

    def client(self, request: Request) -> str:
        """The peer, or, behind trusted proxies, the nearest hop that is not one of them (hops to its
        left were written by the client itself and prove nothing)."""
        peer = request.client.host if request.client else "unknown"
        if not self.networks or not self.trusts(peer):
            return peer
        forwarded = request.headers.getlist("forwarded")
        if forwarded:
            hops = [param.split("=", 1)[1] for element in ",".join(forwarded).split(",")
                    for param in element.split(";") if param.strip().lower().startswith("for=")]
        else:
            hops = ",".join(request.headers.getlist("x-forwarded-for")).split(",")
        hops = [_address(hop) or hop.strip() for hop in hops if hop.strip()]
        for hop in reversed(hops):
            if not self.trusts(hop):
                return hop
        return hops[0] if hops else peer


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
            role = max((r for r in role if isinstance(r, str) and r in ROLE_RANK), key=ROLE_RANK.get,
                       default=auth.oidc_default_role)
        if not isinstance(role, str):  # an object or a number: never a role, never a 500
            raise unauthorized(f"bearer token: claim {auth.role_claim}: a role name or a list of them")
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
        readers = reader_tokens_for(principal, groups)  # user:<sub> and group:<name>, never mixed
        return Caller(tenant=tenant, readers=readers, name=f"oidc:{principal}", role=role)


class Authenticator:
    def __init__(self, settings, keys: KeyStore | None):
        auth = settings.auth
        self.enabled, self.keys, self.limits = auth.enabled, keys, settings.limits
        self.oidc = OidcVerifier(auth) if auth.enabled and auth.oidc_issuer else None
        storage = storage_url(settings)
        self.limiter = RateLimiter(auth.rate_limit, storage, "orgmem-caller", "auth.rate_limit")
        self.failures = RateLimiter(auth.failed_auth_limit, storage, "orgmem-auth-failure",  # per address
                                    "auth.failed_auth_limit")
        per_credential = auth.failed_auth_limit if auth.failed_auth_credential_limit is None \
            else auth.failed_auth_credential_limit
        self.credential_failures = RateLimiter(per_credential, storage, "orgmem-auth-failure-credential",
                                               "auth.failed_auth_credential_limit")
        self.proxies = TrustedProxies(auth.trusted_proxies)
        self.in_flight = InFlight()
        self._slot_count = max(1, auth.failed_auth_verify_slots)
        self._slots: asyncio.Semaphore | None = None

    def client_address(self, request: Request) -> str:
        return self.proxies.client(request)

    def _known(self, token: str, credential: str, client: str) -> tuple[tuple[Caller, str] | None, bool]:
        """A key that verified before (no hash), else whether the address or the credential is
        over its failure limit."""
        key = self.keys.verify(token, cached_only=True) if self.keys and token.startswith("om_") else None
        if key is not None:
            return (key.caller(), f"key:{key.key_id}"), False
        return None, not (self.failures.test(client) and self.credential_failures.test(credential))

    def _verify(self, token: str) -> tuple[Caller, str]:
        if token.startswith("om_"):
            key = self.keys.verify(token) if self.keys else None
            if key is None:
                raise unauthorized("credentials: unknown or revoked API key")
            return key.caller(), f"key:{key.key_id}"
        if self.oidc is not None and token.count(".") == 2:
            caller = self.oidc.caller(token)
            return caller, f"oidc:{caller.tenant}:{caller.name}"
        raise unauthorized("credentials: not an orgmem API key" + (" or a JWT" if self.oidc else ""))

    def verify(self, token: str, credential: str, client: str) -> tuple[Caller, str]:
        """Full verification (a hash, a signature, maybe a key-set fetch); a failure counts once
        against the address and once against the credential, and over either limit answers 429."""
        try:
            return self._verify(token)
        except ApiProblem as problem:
            if problem.status_code != 401:
                raise
            failed = problem
        by_address, by_credential = self.failures.hit(client), self.credential_failures.hit(credential)
        if by_address.allowed and by_credential.allowed:
            raise failed
        limiter, verdict, what = (self.failures, by_address, f"from this address ({client})") \
            if not by_address.allowed else (self.credential_failures, by_credential, "with this credential")
        raise ApiProblem(429, "Too many failed attempts", "credentials: too many failed attempts: "
                         + limiter.refusal(verdict, f"that fail, {what}"), "rate-limited",
                         {"Retry-After": str(verdict.retry_after_s)})

    async def authenticate(self, token: str | None, client: str) -> tuple[Caller, str]:
        """The caller and its rate-limit identity; raises ApiProblem for 401 and 429."""
        if not token:
            raise unauthorized("credentials: send 'Authorization: Bearer <API key or token>'")
        credential = credential_id(token)
        known, suspect = await run_in_threadpool(self._known, token, credential, client)
        if known is not None:
            return known
        if not suspect:
            return await run_in_threadpool(self.verify, token, credential, client)
        # Over a failure limit: still verified (a valid credential is never refused), but a few at
        # a time, so a flood of bad ones costs this many threads; the rest wait holding none.
        if self._slots is None:
            self._slots = asyncio.Semaphore(self._slot_count)
        async with self._slots:
            return await run_in_threadpool(self.verify, token, credential, client)

    def admit(self, identity: str) -> None:
        verdict = self.limiter.hit(identity)
        if not verdict.allowed:
            raise ApiProblem(429, "Too many requests", "rate limit reached: " + self.limiter.refusal(
                verdict, f"per caller, for {identity}"), "rate-limited", {"Retry-After": str(verdict.retry_after_s)})

    def enter(self, identity: str) -> None:
        cap = self.limits.max_in_flight_per_caller  # read per request, so a changed setting applies at once
        if not self.in_flight.enter(identity, cap):
            raise ApiProblem(429, "Too many requests in flight", f"{cap} requests of this caller are in flight, "
                             "the most that limits.max_in_flight_per_caller allows (the operator raises it with "
                             "ORGMEM_LIMITS__MAX_IN_FLIGHT_PER_CALLER); retry when one completes",
                             "too-many-in-flight", {"Retry-After": "1"})


async def current_caller(request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None,
                                                                  Depends(_BEARER)]) -> AsyncIterator[Caller]:
    """The caller, held in flight for the rest of the request (its slot is freed when it ends)."""
    authenticator: Authenticator | None = getattr(request.app.state.orgmem, "auth", None)
    if authenticator is None or not authenticator.enabled:
        request.state.tenant = Caller().tenant  # for the request's span (services.api.tracing)
        yield Caller()  # auth disabled: the embedded profile's single admin of the default tenant
        return
    token = credentials.credentials if credentials else None
    caller, identity = await authenticator.authenticate(token, authenticator.client_address(request))
    request.state.tenant = caller.tenant
    await run_in_threadpool(authenticator.admit, identity)
    authenticator.enter(identity)
    try:
        yield caller
    finally:
        authenticator.in_flight.leave(identity)


CurrentCaller = Annotated[Caller, Depends(current_caller)]


def require_role(role: str):
    """A dependency that admits callers with at least `role` (reader < writer < admin)."""

    def check(caller: CurrentCaller) -> Caller:
        if ROLE_RANK.get(caller.role, -1) < ROLE_RANK[role]:
            raise ApiProblem(403, "Forbidden", f"this route needs the {role} role; the caller has {caller.role}",
                             "forbidden")
        return caller

    return check
