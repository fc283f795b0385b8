"""A test PKI as files (imported as ``tls_pki``; not a test module): a trustme CA, a server
certificate for the names given and a client certificate, for the TLS suites of the server
and of the transport. Callers skip first when trustme is missing (``pytest.importorskip``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def issue_pki(directory: Path, *server_names: str) -> tuple[Any, dict[str, Path]]:
    """The CA, and the paths of its certificate (``ca``), the server's key and certificate
    (``key``, ``cert``) and the client's key and certificate in one file (``client``)."""
    import trustme

    ca = trustme.CA()
    server = ca.issue_cert(*server_names)
    client = ca.issue_cert("client@example.com", common_name="client one")
    files = {
        "ca": directory / "ca.pem",
        "key": directory / "key.pem",
        "cert": directory / "cert.pem",
        "client": directory / "client.pem",
    }
    ca.cert_pem.write_to_path(str(files["ca"]))
    server.private_key_pem.write_to_path(str(files["key"]))
    server.cert_chain_pems[0].write_to_path(str(files["cert"]))
    client.private_key_and_cert_chain_pem.write_to_path(str(files["client"]))
    return ca, files
