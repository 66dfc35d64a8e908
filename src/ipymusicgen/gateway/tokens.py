"""User tokens: high-entropy random strings, stored only as their SHA-256, compared in constant time.

Finding a user by the hash (an indexed column, a dict) may take longer for one hash than another, but that
can tell at most how a guess's hash compares with stored hashes, which leads to no token (SHA-256 has no
known preimage); the found row's hash is then compared with `same_hash` (`hmac.compare_digest`).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

PREFIX = "mgw_"


def new_token() -> str:
    """A fresh token (256 random bits): a plain hash is enough for a secret no one could guess or brute-force."""
    return PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def same_hash(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())
