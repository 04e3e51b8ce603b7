"""A throwaway certificate authority and a server certificate signed by it, made with the
`openssl` command in a temporary folder, for TLS tests against servers on 127.0.0.1."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

# Names the server certificate is valid for (tests resolve them to 127.0.0.1 with a stub).
SERVER_NAMES = ("hooks.test", "localhost")


@dataclass(frozen=True, slots=True)
class Pki:
    ca_pem: Path  # the CA's certificate: what a client adds to its trust store
    cert_pem: Path  # the server's certificate (SAN: SERVER_NAMES and 127.0.0.1)
    key_pem: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert_pem, self.key_pem)
        return context


def make_pki(folder: Path) -> Pki:
    """A new CA and a server certificate for SERVER_NAMES and 127.0.0.1, valid for 2 days."""
    openssl = shutil.which("openssl")
    assert openssl is not None, "these TLS tests need the openssl command (apt-get install openssl)"
    ca_key, ca_pem = folder / "ca.key", folder / "ca.pem"
    key, csr, cert = folder / "server.key", folder / "server.csr", folder / "server.pem"
    extensions = folder / "server.ext"
    names = ",".join(f"DNS:{n}" for n in SERVER_NAMES)
    extensions.write_text(
        f"subjectAltName={names},IP:127.0.0.1\n"
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=serverAuth\n"
    )
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run = [
        [openssl, "req", "-x509", *ec, "-keyout", ca_key, "-out", ca_pem, "-days", "2",
         "-subj", "/CN=tickwork throwaway test CA",
         "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        [openssl, "req", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=hooks.test"],
        [openssl, "x509", "-req", "-in", csr, "-CA", ca_pem, "-CAkey", ca_key,
         "-CAcreateserial", "-out", cert, "-days", "2", "-extfile", extensions],
    ]  # fmt: skip
    for command in run:
        subprocess.run([str(part) for part in command], check=True, capture_output=True)
    return Pki(ca_pem=ca_pem, cert_pem=cert, key_pem=key)
