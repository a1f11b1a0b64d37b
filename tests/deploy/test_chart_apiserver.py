"""The chart's objects against a real kube-apiserver: every rendered object accepted by the real schemas.

`helm template --include-crds` for several value sets, applied with `kubectl apply --dry-run=server
--validate=strict` (unknown or misplaced fields are errors). The certificate Job cannot run here (no
kubelet), so its two steps are run as the Job would, with the Job's own arguments, under the Job's
own ServiceAccount and Role (impersonated): the Secret the webhook mounts must come out.
"""

from __future__ import annotations

import base64
import datetime as dt
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from tests.deploy.chart import Helm, Obj, find
from tests.deploy.test_chart import VALUE_SETS
from tests.e2e.controlplane import ControlPlane
from webhook import certs

pytestmark = pytest.mark.e2e

# cert-manager's kinds: this API server has no cert-manager CRDs, so those objects are checked by
# test_chart.py's structure tests only.
CERT_MANAGER = "cert-manager.io/v1"


def _ca_pem(tmp_path: Path) -> str:
    paths = certs.write_bundle(tmp_path / "ca", "trainguard", "trainguard-system", [], 30)
    return paths.ca_cert.read_text("utf-8")


def _dry_run(apiserver: ControlPlane, objects: list[Obj], tmp_path: Path) -> str:
    manifest = tmp_path / "rendered.yaml"
    manifest.write_text(yaml.safe_dump_all(objects), encoding="utf-8")
    result = apiserver.kubectl(
        "apply", "--dry-run=server", "--validate=strict", "-f", str(manifest), check=False
    )
    assert result.returncode == 0, result.stderr
    assert "Warning" not in result.stderr, result.stderr
    return result.stdout


@pytest.mark.parametrize(
    ("values", "check"),
    [pytest.param({}, None, id="defaults"), *VALUE_SETS],
)
def test_every_rendered_object_is_accepted(
    helm: Helm,
    apiserver: ControlPlane,
    fresh_namespace: str,
    tmp_path: Path,
    values: dict[str, Any],
    check: Any,
) -> None:
    if values.get("certificates", {}).get("caBundle"):
        values = {**values, "certificates": {**values["certificates"], "caBundle": _ca_pem(tmp_path)}}
    objects = helm.objects(values, namespace=fresh_namespace, extra=("--include-crds",), tmp=tmp_path)
    checked = [o for o in objects if o["apiVersion"] != CERT_MANAGER]
    out = _dry_run(apiserver, checked, tmp_path)
    for obj in checked:
        assert f"{obj['metadata']['name']} created (server dry run)" in out, (obj["kind"], out)


def test_the_certificate_job_writes_the_secret_the_webhook_mounts(
    helm: Helm, apiserver: ControlPlane, fresh_namespace: str, tmp_path: Path
) -> None:
    objects = helm.objects(namespace=fresh_namespace)
    # The Job's identity, for real: its ServiceAccount, Role and RoleBinding.
    rbac = [o for o in objects if o["metadata"]["name"] == "trainguard-certgen" and o["kind"] != "Job"]
    (tmp_path / "rbac.yaml").write_text(yaml.safe_dump_all(rbac), encoding="utf-8")
    apiserver.kubectl("apply", "-f", str(tmp_path / "rbac.yaml"))

    job = find(objects, "Job", "trainguard-certgen")["spec"]["template"]["spec"]
    kustomization = find(objects, "ConfigMap", "trainguard-certgen")["data"]["kustomization.yaml"]
    work = tmp_path / "work"
    work.mkdir()
    (work / "kustomization.yaml").write_text(kustomization, encoding="utf-8")

    # Step 1, the init container: the image's entrypoint is `trainguard`.
    (init,) = job["initContainers"]
    args = [a.replace("/work", str(work)) for a in init["args"]]
    subprocess.run([sys.executable, "-m", "webhook", *args], check=True, capture_output=True, timeout=60)
    # Step 2, the kubectl container, as the Job's ServiceAccount.
    (apply,) = job["containers"]
    account = f"system:serviceaccount:{fresh_namespace}:{job['serviceAccountName']}"
    kubectl_args = [a.replace("/work", str(work)) for a in apply["args"]]
    for _ in range(2):  # a second run (a retried Job) must succeed too
        apiserver.kubectl(*kubectl_args, f"--as={account}")

    secret = apiserver.kubectl_json("-n", fresh_namespace, "get", "secret", "trainguard-tls")
    assert sorted(secret["data"]) == ["ca.crt", "tls.crt", "tls.key"]
    tls = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    ca = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["ca.crt"]))
    tls.verify_directly_issued_by(ca)
    names = tls.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName
    )
    assert f"trainguard.{fresh_namespace}.svc" in names
    assert tls.not_valid_after_utc > dt.datetime.now(dt.UTC) + dt.timedelta(days=300)
    # The Deployment mounts that Secret.
    volumes = {
        v["name"]: v for v in find(objects, "Deployment", "trainguard")["spec"]["template"]["spec"]["volumes"]
    }
    assert volumes["tls"]["secret"]["secretName"] == "trainguard-tls"


def test_every_pod_meets_the_restricted_pod_security_standard(
    helm: Helm, apiserver: ControlPlane, fresh_namespace: str, tmp_path: Path
) -> None:
    """The webhook's and the certificate Job's pods, created (dry run) where `restricted` is enforced.

    No controller turns the templates into Pods here, so the test does: Pod Security admission
    judges Pods only, and refuses with the names of the offending fields.
    """
    apiserver.kubectl("label", "namespace", fresh_namespace, "pod-security.kubernetes.io/enforce=restricted")
    objects = helm.objects(namespace=fresh_namespace)
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{o['metadata']['name']}-{o['kind'].lower()}",
                "namespace": fresh_namespace,
            },
            "spec": o["spec"]["template"]["spec"],
        }
        for o in objects
        if o["kind"] in ("Deployment", "Job")
    ]
    assert len(pods) == 2
    out = _dry_run(apiserver, pods, tmp_path)
    assert out.count("created (server dry run)") == 2
    # The namespace really enforces it: the same Pod without its security context is refused.
    bare = yaml.safe_load(yaml.safe_dump(pods[0]))
    bare["metadata"]["name"] = "no-security-context"
    del bare["spec"]["securityContext"]
    for container in bare["spec"]["containers"]:
        del container["securityContext"]
    (tmp_path / "bare.yaml").write_text(yaml.safe_dump(bare), encoding="utf-8")
    refused = apiserver.kubectl("apply", "--dry-run=server", "-f", str(tmp_path / "bare.yaml"), check=False)
    assert refused.returncode != 0 and "violates PodSecurity" in refused.stderr, refused.stderr
