"""A ledger database URL as it may be shown: on a console, in an error, in a log line."""

from __future__ import annotations


def shown_database(url: str) -> str:
    """The database without its user and password (`postgresql://***@host/db`); a file path as it is."""
    if "://" in url and "@" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.rsplit('@', 1)[1]}"
    return url
