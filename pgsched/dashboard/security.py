"""Who may use the dashboard, and proof that a form came from it.

Binding: 127.0.0.1 by default. A bind any other host can reach needs authentication, or the
dashboard refuses to start (ConfigError, exit 2) naming the variable to set.

Authentication: HTTP Basic. The password is a token, given to the process as its scrypt
hash (PGSCHED_DASHBOARD_TOKEN_HASH, from `pgsched dashboard --hash-token`) or, for
convenience, in clear (PGSCHED_DASHBOARD_TOKEN, hashed at start and then dropped). The user
name is free: it is recorded as the actor of every change.

CSRF: a per-browser random token in a signed cookie (itsdangerous), echoed in a hidden field
of every form; a POST whose field does not match its cookie is refused with 403.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import os
import secrets
from dataclasses import dataclass, field

from itsdangerous import BadSignature, URLSafeSerializer

from pgsched.errors import ConfigError

TOKEN_HASH_ENV = "PGSCHED_DASHBOARD_TOKEN_HASH"
TOKEN_ENV = "PGSCHED_DASHBOARD_TOKEN"
SECRET_ENV = "PGSCHED_DASHBOARD_SECRET"

CSRF_COOKIE = "pgsched_csrf"
CSRF_FIELD = "csrf_token"

# scrypt at n=2**14 costs ~50 ms: slow for a guesser, and paid once per credential, since
# a verified Authorization header is remembered by its digest.
_SCRYPT = {"n": 2**14, "r": 8, "p": 1, "dklen": 32}


def hash_token(token: str, salt: bytes | None = None) -> str:
    """`scrypt$<salt hex>$<hash hex>`: what PGSCHED_DASHBOARD_TOKEN_HASH holds."""
    if not token:
        raise ConfigError("the dashboard token must not be empty")
    salt = salt if salt is not None else secrets.token_bytes(16)
    digest = hashlib.scrypt(token.encode(), salt=salt, **_SCRYPT)
    return f"scrypt${salt.hex()}${digest.hex()}"


def _parse_hash(stored: str) -> tuple[bytes, bytes]:
    try:
        scheme, salt_hex, digest_hex = stored.strip().split("$")
        if scheme != "scrypt":
            raise ValueError(scheme)
        return bytes.fromhex(salt_hex), bytes.fromhex(digest_hex)
    except ValueError:
        raise ConfigError(
            f"{TOKEN_HASH_ENV} must be scrypt$<salt hex>$<hash hex>, as printed by "
            "`pgsched dashboard --hash-token`"
        ) from None


def is_local_host(host: str) -> bool:
    """True when only this machine can reach `host` (loopback addresses, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class TokenAuth:
    """Checks HTTP Basic credentials against the stored scrypt hash of the token."""

    salt: bytes
    digest: bytes
    _accepted: set[bytes] = field(default_factory=set)

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> TokenAuth | None:
        env = os.environ if environ is None else environ
        stored = env.get(TOKEN_HASH_ENV, "").strip()
        if not stored and env.get(TOKEN_ENV):
            stored = hash_token(env[TOKEN_ENV])
        if not stored:
            return None
        salt, digest = _parse_hash(stored)
        return cls(salt, digest)

    def user_for(self, authorization: str | None) -> str | None:
        """The user name of valid Basic credentials, else None."""
        if not authorization or not authorization.lower().startswith("basic "):
            return None
        try:
            decoded = base64.b64decode(authorization[6:].strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return None
        user, sep, token = decoded.partition(":")
        if not sep or not user or not token:
            return None
        key = hashlib.sha256(authorization.encode()).digest()
        if key in self._accepted:
            return user
        candidate = hashlib.scrypt(token.encode(), salt=self.salt, **_SCRYPT)
        if not hmac.compare_digest(candidate, self.digest):
            return None
        self._accepted.add(key)
        return user


def check_bind(host: str, auth: TokenAuth | None) -> None:
    """Refuse a bind other machines can reach when no authentication is configured."""
    if auth is None and not is_local_host(host):
        raise ConfigError(
            f"refusing to listen on {host} without authentication: set {TOKEN_HASH_ENV} "
            f"(from `pgsched dashboard --hash-token`) or {TOKEN_ENV}, or bind 127.0.0.1"
        )


class CsrfTokens:
    """Double submit: a random token, signed into a cookie and echoed by each form."""

    def __init__(self, secret: str | None = None) -> None:
        key = secret or os.environ.get(SECRET_ENV) or secrets.token_urlsafe(32)
        self._signer = URLSafeSerializer(key, salt="pgsched-dashboard-csrf")

    def new(self) -> tuple[str, str]:
        """A fresh token and the cookie value that carries it."""
        token = secrets.token_urlsafe(32)
        return token, self._signer.dumps(token)

    def token_in(self, cookie: str | None) -> str | None:
        """The token a cookie carries, if the cookie is ours and intact."""
        if not cookie:
            return None
        try:
            token = self._signer.loads(cookie)
        except BadSignature:
            return None
        return token if isinstance(token, str) else None

    def matches(self, cookie: str | None, submitted: str | None) -> bool:
        token = self.token_in(cookie)
        return bool(token and submitted and hmac.compare_digest(token, submitted))
