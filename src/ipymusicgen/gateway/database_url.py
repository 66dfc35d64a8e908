"""A ledger database URL as it may be shown: on a console, in an error, in a log line.

A password can ride in a URL three ways: its user info (`postgresql://user:pw@host/db`), a query parameter
(`?password=pw`, `&sslpassword=pw`), or a `password=pw` word of a keyword connection string. Each is masked, and
`masked` masks each password (as written and percent-decoded) wherever a driver's error repeats it.
"""

from __future__ import annotations

import re
import urllib.parse

_SECRET_WORD = re.compile(r"(?i)\b((?:ssl)?password\s*=\s*)('[^']*'|[^\s&#]*)")
"""`password=...` (or `sslpassword=`) in a query string or a keyword connection string, up to its end."""


def shown_database(url: str) -> str:
    """The database without its user, password or password parameters (`postgresql://***@host/db`); a plain
    file path as it is."""
    shown = url
    if "://" in url:
        scheme, rest = url.split("://", 1)
        where, mark, query = rest.partition("?")
        if "@" in where:
            where = "***@" + where.rsplit("@", 1)[1]
        shown = f"{scheme}://{where}{mark}{query}"
    return _SECRET_WORD.sub(lambda m: m.group(1) + "***", shown)


def _secrets(url: str) -> set[str]:
    found = {m.group(2).strip("'") for m in _SECRET_WORD.finditer(url)}
    if "://" in url:
        where = url.split("://", 1)[1].partition("?")[0]
        if "@" in where:
            user_info = where.rsplit("@", 1)[0]
            found.add(user_info.partition(":")[2])
    found |= {urllib.parse.unquote(s) for s in found}
    return {s for s in found if s}


def masked(text: str, url: str) -> str:
    """`text` (a driver's error, say) with the URL shown as `shown_database` shows it and every password in it
    masked, as written or percent-decoded."""
    text = text.replace(url, shown_database(url))
    for secret in sorted(_secrets(url), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text
