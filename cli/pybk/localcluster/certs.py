"""A throw-away certificate authority and certificates for trying TLS locally (``pybk
localcluster --tls``, test fixtures), made with ``cryptography``.

Every certificate is signed by the one CA, valid for a week, with a subject key identifier and
an authority key identifier (Python 3.13's strict verification rejects certificates without
one). Leaves name ``localhost`` and ``127.0.0.1`` (bookie ids are IP addresses by default, and
gRPC checks the name it dialled) and are good for both server and client authentication; the
identity a bookie sees is the leaf's common name. Keys are PKCS#8 PEM, unencrypted, mode 0600.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=7)


@dataclass(frozen=True)
class CertFiles:
    cert: Path
    key: Path


class ThrowAwayCa:
    """A CA whose key lives only in this object; ``issue`` writes leaf certificates to files."""

    def __init__(self, name: str = "pybk throw-away CA") -> None:
        self._key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        public = self._key.public_key()
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(subject).issuer_name(subject).public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=False, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .sign(self._key, hashes.SHA256())
        )  # fmt: skip

    def write_ca(self, path: Path) -> Path:
        path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        return path

    def issue(
        self, common_name: str, directory: Path, hosts: tuple[str, ...] = ("localhost", "127.0.0.1")
    ) -> CertFiles:
        """A leaf for ``common_name`` naming ``hosts``, written as ``<cn>.pem`` and ``<cn>.key``."""
        key = ec.generate_private_key(ec.SECP256R1())
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        now = datetime.datetime.now(datetime.UTC)
        ca_ski = self.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self.cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
            .sign(self._key, hashes.SHA256())
        )  # fmt: skip
        directory.mkdir(parents=True, exist_ok=True)
        files = CertFiles(directory / f"{common_name}.pem", directory / f"{common_name}.key")
        files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        fd = os.open(files.key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(key_pem)
        return files


@dataclass(frozen=True)
class ClusterTls:
    """A local cluster's TLS files: what bookies are configured with, and the client's file."""

    bookie_settings: dict[str, str]  # BookKeeper keys, given to each bookie as BK_<key>
    client_conf: Path  # for PYBK_CLIENT_CONF: every client, tool and autorecovery reads it


def make_cluster_tls(directory: Path, *hosts: str) -> ClusterTls:
    """A fresh CA (its key is forgotten at once), a bookie certificate naming ``hosts`` (and
    localhost) and a client certificate with every right, under ``directory``. Bookies require
    the client certificate (mutual TLS) and take the caller's identity from it."""
    authority = ThrowAwayCa("pybk throw-away CA")
    directory.mkdir(parents=True, exist_ok=True)
    ca = authority.write_ca(directory / "ca.pem")
    hosts = tuple(dict.fromkeys(("localhost", "127.0.0.1", *hosts)))
    bookie = authority.issue("bookie", directory, hosts)
    client = authority.issue("client", directory, hosts)
    rights = directory / "rights"
    # "bookie": autorecovery presents the bookie certificate, as BookKeeper's shares its conf
    rights.write_text("# identity (certificate common name) = rights\nclient=all\nbookie=read,write,fence\n")
    settings = {
        "tlsCertificatePath": str(bookie.cert), "tlsKeyStore": str(bookie.key), "tlsKeyStoreType": "PEM",
        "tlsTrustStore": str(ca), "tlsClientAuthentication": "true",
        "bookieAuthProviderFactoryClass": "mtls", "bookieAuthorizationFile": str(rights),
    }  # fmt: skip
    client_conf = directory / "client.conf"
    client_conf.write_text(
        f"clientTrustStore={ca}\nclientCertificatePath={client.cert}\nclientKeyStore={client.key}\n"
    )
    return ClusterTls(settings, client_conf)
