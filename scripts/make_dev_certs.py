"""Issue a throwaway CA and workload certificates for TLS/mTLS in tests, compose and local clusters.

Each certificate allows serverAuth and clientAuth, because every Egbe service both serves and
dials. Never use these in production: the CA key is written beside the certificates.

    python scripts/make_dev_certs.py deploy/certs kernel gateway cognition policy biography operator
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=30)
# Names every workload certificate answers to besides its own, so local probes can dial loopback.
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True)
class IssuedCertificate:
    """PEM files of one identity."""

    cert_file: Path
    key_file: Path


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _subject_alternative_names(names: list[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for name in names:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(entries)


def issue_ca(out_dir: Path, common_name: str = "egbe dev CA") -> tuple[Path, ec.EllipticCurvePrivateKey]:
    """A self-signed CA written to out_dir/ca.pem (+ ca-key.pem); returns the path and its key."""
    out_dir.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    path = out_dir / "ca.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, out_dir / "ca-key.pem")
    return path, key


def issue_certificate(
    out_dir: Path,
    name: str,
    ca_file: Path,
    ca_key: ec.EllipticCurvePrivateKey,
    extra_names: tuple[str, ...] = LOOPBACK_NAMES,
) -> IssuedCertificate:
    """A workload certificate for `name` (plus extra_names as SANs) signed by the CA."""
    ca_cert = x509.load_pem_x509_certificate(ca_file.read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_subject_alternative_names([name, *extra_names]), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    issued = IssuedCertificate(out_dir / f"{name}.pem", out_dir / f"{name}-key.pem")
    issued.cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, issued.key_file)
    return issued


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("names", nargs="+", help="one certificate per name (also its DNS SAN)")
    args = parser.parse_args()
    ca_file, ca_key = issue_ca(args.out_dir)
    for name in args.names:
        issued = issue_certificate(args.out_dir, name, ca_file, ca_key)
        print(f"{name}: {issued.cert_file} {issued.key_file}")
    print(f"CA: {ca_file}")


if __name__ == "__main__":
    main()
