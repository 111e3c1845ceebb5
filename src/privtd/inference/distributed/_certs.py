"""A private certificate authority and the certificates of a small Dask cluster.

Dask's TLS (``distributed.security.Security``) lets a party in only if it presents a
certificate that the cluster's CA signed; it checks no host names (a cluster is reached by
IP address as often as by name). So whoever holds one of these keys is a member of the
cluster, and whoever holds none is refused. The CA's own key is used once, here, and never
written: no one can add a party later, and a stolen folder lets no one mint more.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from pathlib import Path

from ...errors import ValidationError

#: Parties besides the workers, in the order their files are made.
PARTIES = ("scheduler", "client")


def _require_cryptography() -> None:
    try:
        import cryptography  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "Making cluster certificates needs cryptography: pip install 'privtd[dask]'."
        ) from exc


def make_cluster_certs(
    folder: str | os.PathLike[str],
    *,
    workers: int = 2,
    hosts: Sequence[str] = (),
    days: int = 365,
) -> dict[str, tuple[str, str]]:
    """Write a private CA's certificate and, signed by it, a certificate and key for the
    scheduler, the client and each of ``workers`` workers, into ``folder``.

    Files: ``ca.pem`` (the CA's certificate, which every party needs), and for each party
    ``NAME.pem`` and ``NAME-key.pem`` (mode 0600), NAME being ``scheduler``, ``client``,
    ``worker-1`` ... Keys are ECDSA P-256. ``hosts`` (names or IP addresses) go into the
    scheduler's and workers' certificates as subject alternative names, for tools that check
    them; Dask does not. Returns ``{party: (certificate, key)}``, with ``"ca"`` mapped to
    ``(ca.pem, "")``. Refuses to overwrite any file.
    """
    _require_cryptography()
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 1000:
        raise ValidationError(f"workers must be an int in [1, 1000]. Got {workers!r}.")
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= 3650:
        raise ValidationError(f"days must be an int in [1, 3650]. Got {days!r}.")
    root = Path(folder)
    names = [*PARTIES, *(f"worker-{i}" for i in range(1, workers + 1))]
    targets = [root / "ca.pem"] + [root / f"{n}{s}" for n in names for s in (".pem", "-key.pem")]
    clash = [str(p) for p in targets if os.path.lexists(p)]
    if clash:
        raise ValidationError(
            f"{clash[0]!r} exists: a new CA would not sign for the old keys. Pick an empty "
            "folder (then give every party its new files)."
        )
    alt: list[x509.GeneralName] = []
    for host in hosts:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            alt.append(x509.DNSName(host))
    root.mkdir(mode=0o700, parents=True, exist_ok=True)

    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "privtd cluster"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"privtd cluster CA {os.urandom(4).hex()}"),
        ]
    )
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
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
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    out: dict[str, tuple[str, str]] = {"ca": (str(root / "ca.pem"), "")}
    _write(root / "ca.pem", ca_cert.public_bytes(pem), 0o644)
    for name in names:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(
                x509.Name(
                    [
                        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "privtd cluster"),
                        x509.NameAttribute(NameOID.COMMON_NAME, name),
                    ]
                )
            )
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=True,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            # Every Dask party both connects and accepts connections (workers talk to each
            # other), so each certificate serves as client and as server.
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
                critical=False,
            )
        )
        if alt and name != "client":
            builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        key_pem = key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        _write(root / f"{name}-key.pem", key_pem, 0o600)
        _write(root / f"{name}.pem", cert.public_bytes(pem), 0o644)
        out[name] = (str(root / f"{name}.pem"), str(root / f"{name}-key.pem"))
    return out


def _write(path: Path, data: bytes, mode: int) -> None:
    """Create ``path`` with ``mode`` from the start (a key is never readable by others, not
    even for a moment), failing if it exists."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
