"""One TLS context for every client of the package (loading certifi's bundle cost 20-45 ms per client), and still
the trust the environment asks for when a client is made: a CA bundle set after the first client is used."""

from __future__ import annotations

import re
from pathlib import Path

import certifi
import pytest

from ipymusicgen import MusicClient
from ipymusicgen.client.transport import trust_store


def _ssl_context(client: MusicClient) -> object:
    return client._http._transport._pool._ssl_context  # httpx's transport, its httpcore pool


def test_every_client_shares_one_context_until_the_trust_setting_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    with MusicClient("k" * 20, journal=False) as one, MusicClient("k" * 20, journal=False) as two:
        assert _ssl_context(one) is _ssl_context(two) is trust_store()
    default = trust_store()
    assert default.cert_store_stats()["x509_ca"] > 1  # certifi's bundle

    first = re.search(
        r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----\n", Path(certifi.where()).read_text(), re.S
    )
    assert first is not None
    bundle = tmp_path / "company-ca.pem"
    bundle.write_text(first.group(0))
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))  # set after the first clients, as in a notebook
    with MusicClient("k" * 20, journal=False) as later:
        assert _ssl_context(later) is not default
        assert _ssl_context(later).cert_store_stats()["x509_ca"] == 1  # type: ignore[attr-defined]
    monkeypatch.delenv("SSL_CERT_FILE")
    assert trust_store() is default
