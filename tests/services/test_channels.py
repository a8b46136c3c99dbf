"""TLS settings validation and the channel factory's choice of transport."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from assembly.settings import load_settings
from scripts.make_dev_certs import issue_ca, issue_certificate
from services.channels import dialable_target, uses_tls
from services.settings import TlsMode, TlsSettings


@pytest.fixture(scope="module")
def pem_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("pem")
    ca_file, ca_key = issue_ca(out)
    issued = issue_certificate(out, "kernel", ca_file, ca_key)
    return {"ca_file": ca_file, "cert_file": issued.cert_file, "key_file": issued.key_file}


def test_tls_is_off_by_default() -> None:
    assert load_settings().tls.mode is TlsMode.OFF


def test_mtls_names_every_missing_file(pem_files: dict[str, Path]) -> None:
    with pytest.raises(ValidationError, match=r"tls\.mode=mtls needs tls\.ca_file"):
        TlsSettings(mode=TlsMode.MTLS, cert_file=pem_files["cert_file"], key_file=pem_files["key_file"])


def test_cert_without_key_is_refused(pem_files: dict[str, Path]) -> None:
    with pytest.raises(ValidationError, match="set together"):
        TlsSettings(mode=TlsMode.TLS, cert_file=pem_files["cert_file"])


def test_missing_certificate_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="cert_file"):
        TlsSettings(mode=TlsMode.TLS, cert_file=tmp_path / "absent.pem", key_file=tmp_path / "absent.key")


def test_tls_settings_come_from_the_environment(
    pem_files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EGBE_TLS__MODE", "mtls")
    for name, path in pem_files.items():
        monkeypatch.setenv(f"EGBE_TLS__{name.upper()}", str(path))
    tls = load_settings().tls
    assert tls.mode is TlsMode.MTLS
    assert tls.ca_file == pem_files["ca_file"]


@pytest.mark.parametrize(
    ("listen", "dial"),
    [
        ("0.0.0.0:50052", "127.0.0.1:50052"),
        ("[::]:50052", "[::1]:50052"),
        ("gateway:50052", "gateway:50052"),
        ("unix:/run/egbe/kernel.sock", "unix:/run/egbe/kernel.sock"),
    ],
)
def test_wildcard_listen_addresses_are_dialled_on_loopback(listen: str, dial: str) -> None:
    assert dialable_target(listen) == dial


def test_unix_sockets_never_use_tls(pem_files: dict[str, Path]) -> None:
    tls = TlsSettings(mode=TlsMode.MTLS, **pem_files)
    assert not uses_tls("unix:/run/egbe/kernel.sock", tls)
    assert uses_tls("kernel:50051", tls)
    assert not uses_tls("kernel:50051", TlsSettings())
