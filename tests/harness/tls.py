"""Throwaway TLS material for tests, made with the openssl command line: a
self-signed CA and a server certificate for 127.0.0.1 / localhost signed by it."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TlsFiles:
    ca_cert: Path
    cert: Path
    key: Path


def _openssl(*args: str, cwd: Path) -> None:
    binary = shutil.which("openssl")
    if binary is None:
        raise RuntimeError("openssl is not installed (CI installs it with apt)")
    subprocess.run([binary, *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(folder: Path, name: str = "ca") -> tuple[Path, Path]:
    """A self-signed CA: (certificate, key)."""
    folder.mkdir(parents=True, exist_ok=True)
    cert, key = folder / f"{name}.crt", folder / f"{name}.key"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
             "-subj", f"/CN=leasequeue test {name}", "-keyout", str(key), "-out", str(cert),
             cwd=folder)
    return cert, key


def make_server_tls(folder: Path) -> TlsFiles:
    """A CA and a server certificate it signed, valid for 127.0.0.1 and localhost."""
    ca_cert, ca_key = make_ca(folder)
    key, csr, cert = folder / "server.key", folder / "server.csr", folder / "server.crt"
    ext = folder / "san.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
             "-keyout", str(key), "-out", str(csr), cwd=folder)
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca_cert), "-CAkey", str(ca_key),
             "-CAcreateserial", "-days", "2", "-extfile", str(ext), "-out", str(cert),
             cwd=folder)
    return TlsFiles(ca_cert, cert, key)
