"""Policy files: the shipped set loads on both CEL backends; a broken file is refused with its location."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.engine.compile import load_policy_set
from webhook.engine.load import default_policies_dir
from webhook.errors import PolicyError

BACKENDS = ["cel-expr-python", "cel-python"]

SHIPPED = {
    "gang-required", "min-available", "torchrun-consistency", "checkpoint-required", "pool-separation",
    "topology-slo", "recovery-policy", "queue-immutable", "mutate-queue", "mutate-priority",
    "mutate-topology", "mutate-pool", "mutate-class-label", "mutate-checkpoint-env", "trainjob-runtime",
    "mutate-resume-gate", "mutate-resume-priority", "resume-settings", "checkpoint-interval-advice",
    "launch-limits", "launch-consistency", "role-claim", "tier-claim", "pod-group-count",
    "accelerate-deepspeed-consistency",
}  # fmt: skip
WARN = {
    "recovery-policy", "trainjob-runtime", "launch-consistency", "launch-limits", "resume-settings",
    "checkpoint-interval-advice", "accelerate-deepspeed-consistency",
}  # fmt: skip


@pytest.mark.parametrize("backend", BACKENDS)
def test_shipped_policies_compile_on_both_backends(backend: str) -> None:
    policy_set = load_policy_set([default_policies_dir()], backend)
    assert set(policy_set.names()) == SHIPPED
    assert policy_set.backend.name == backend
    modes = {p.name: p.policy.mode for p in policy_set.policies}
    assert {name for name, mode in modes.items() if mode == "Warn"} == WARN
    assert all(mode == "Enforce" for name, mode in modes.items() if name not in WARN)


def _policy(spec: str, name: str = "p") -> str:
    return (
        f"apiVersion: trainguard.dev/v1alpha1\nkind: TrainingPolicy\nmetadata:\n  name: {name}\nspec:\n{spec}"
    )


VALID_SPEC = "  validations:\n    - expression: workload.totalPods > 0\n      message: m\n"

BROKEN = [
    pytest.param(
        _policy("  validations:\n    - expression: workload.totalPods >\n      message: m\n"),
        "policy p, spec.validations[0].expression (line 1, column",
        id="cel-syntax-error-with-position",
    ),
    pytest.param(
        _policy("  validation:\n    - expression: 'true'\n"),
        "policy p, spec: unknown field 'validation'",
        id="typo-in-spec-field",
    ),
    pytest.param(
        _policy("  mode: Deny\n" + VALID_SPEC),
        "spec.mode: must be one of Enforce, Warn, Audit",
        id="bad-mode",
    ),
    pytest.param(
        _policy("  match:\n    classes: [D]\n" + VALID_SPEC),
        "spec.match.classes: 'D' is not one of A, B, C",
        id="bad-class",
    ),
    pytest.param(
        _policy("  match:\n    kueueManagedPods: Only\n" + VALID_SPEC),
        "spec.match.kueueManagedPods: must be one of Exclude, Include",
        id="bad-kueue-managed-pods",
    ),
    pytest.param(
        _policy("  validations:\n    - expression: 'true'\n"),
        "spec.validations[0]: message or messageExpression is required",
        id="no-message",
    ),
    pytest.param(_policy("  mode: Warn\n"), "a policy needs validations or mutations", id="empty-policy"),
    pytest.param(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
        "expected apiVersion trainguard.dev/v1alpha1",
        id="not-a-policy",
    ),
    pytest.param(
        _policy(VALID_SPEC).replace(
            "  name: p\n", "  name: p\n  annotations:\n    trainguard.dev/review-question: speed\n"
        ),
        "metadata.annotations[trainguard.dev/review-question]: must be one of gang, topology, preemption",
        id="unknown-review-question",
    ),
    pytest.param(
        _policy(VALID_SPEC).replace("spec:", "spec:\n  mode: Warn\n  mode: Audit", 1),
        "duplicate key 'mode'",
        id="duplicate-key",
    ),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("text", "words"), BROKEN)
def test_broken_policy_file_names_file_policy_and_position(
    tmp_path: Path, backend: str, text: str, words: str
) -> None:
    (tmp_path / "good.yaml").write_text(_policy(VALID_SPEC, name="good"))
    bad = tmp_path / "zz-bad.yaml"
    bad.write_text(text)
    with pytest.raises(PolicyError) as info:
        load_policy_set([tmp_path], backend)
    assert str(bad) in str(info.value)
    assert words in str(info.value)


def test_no_paths_means_the_shipped_set() -> None:
    assert load_policy_set().digest == load_policy_set([default_policies_dir()]).digest


def test_every_shipped_policy_names_the_review_question_it_answers() -> None:
    ps = load_policy_set([default_policies_dir()])
    assert {
        cp.name: cp.policy.review_question for cp in ps.policies if cp.policy.review_question is None
    } == {}


def test_duplicate_policy_names_across_files_are_refused(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(_policy(VALID_SPEC, name="same"))
    (tmp_path / "b.yaml").write_text(_policy(VALID_SPEC, name="same"))
    with pytest.raises(PolicyError, match="duplicate policy name"):
        load_policy_set([tmp_path])


def test_digest_changes_with_content(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(_policy(VALID_SPEC))
    first = load_policy_set([tmp_path]).digest
    (tmp_path / "a.yaml").write_text(_policy(VALID_SPEC.replace("> 0", ">= 0")))
    assert load_policy_set([tmp_path]).digest != first


def test_every_shipped_policy_is_in_its_phase_program_on_the_cpp_runtime() -> None:
    """A policy its phase's program cannot hold (the runtime's parser caps nesting at 32) falls
    back to one evaluation per variable and expression, several times slower per admission."""
    policy_set = load_policy_set([default_policies_dir()], "cel-expr-python")
    refused = {
        cp.policy.name: refusal
        for phase, policies in (
            (policy_set.mutating_joined, policy_set.mutating),
            (policy_set.validating_joined, policy_set.validating),
        )
        for cp, refusal in zip(policies, phase.refusals, strict=True)
        if refusal is not None
    }
    assert refused == {}
