"""PlatformConfig: what belongs to the platform rather than to a policy.

Queues per namespace, tier <-> priority classes, pool keys, topology keys, checkpoint bounds and
restart limits. Policies read it as the CEL variable `params`; adapters read the typed fields.
Embedded defaults make everything work with no file.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from webhook.errors import ConfigError

_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def parse_duration(text: str) -> int | None:
    """Seconds in a Go-style duration such as "30m", "1h30m", "90s"; None if it is not one."""
    text = text.strip()
    m = _DURATION.match(text)
    if not text or not m or not any(m.groups()):
        return None
    h, mi, s = (int(g) if g else 0 for g in m.groups())
    return h * 3600 + mi * 60 + s


@dataclass(frozen=True, slots=True)
class PlatformConfig:
    raw: dict[str, Any]  # the merged document; policies see it as `params`
    source: str

    # Typed accessors for the fields adapters and mutations use in Python.
    @property
    def pool_label_key(self) -> str:
        return str(self.raw["pools"]["labelKey"])

    @property
    def pool_taint_key(self) -> str:
        return str(self.raw["pools"]["taintKey"])

    @property
    def accelerators(self) -> tuple[str, ...]:
        """Extended resource names (or prefixes ending in "*") that count as GPUs."""
        return tuple(self.raw["accelerators"])

    @property
    def excluded_namespaces(self) -> tuple[str, ...]:
        return tuple(self.raw.get("excludedNamespaces") or ())

    def tier_for_priority_class(self, name: str | None) -> str | None:
        if not name:
            return None
        for tier, names in (self.raw["tiers"]["priorityClasses"] or {}).items():
            if name in (names or ()):
                return str(tier)
        return None

    def recovery(self, tier: str) -> dict[str, Any] | None:
        """The tier's recovery settings with defaults filled in; None when the tier is not governed."""
        block = self.raw["recovery"]["tiers"].get(tier)
        return block if isinstance(block, dict) else None

    def params(self) -> dict[str, Any]:
        return self.raw


def _defaults_text() -> str:
    return (resources.files("webhook") / "_data" / "platform-defaults.yaml").read_text("utf-8")


def schema() -> dict[str, Any]:
    """The JSON Schema of a PlatformConfig file (draft-07, as Helm reads values schemas)."""
    loaded: dict[str, Any] = json.loads(_schema_text())
    return loaded


@functools.cache
def _schema_text() -> str:
    return (resources.files("webhook") / "_data" / "platform-config.schema.json").read_text("utf-8")


@functools.cache
def _validator() -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(schema())


def _check_types(doc: dict[str, Any], source: str) -> None:
    """ConfigError naming the first field (in path order) that the schema refuses."""
    errors = sorted(_validator().iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path])
    if not errors:
        return
    error = errors[0]
    # A block that is "null or a mapping" fails as a whole: name what is wrong inside its mapping.
    while error.context:
        candidates = [e for e in error.context if e.schema.get("type") != "null"]
        if not candidates:
            break
        error = max(candidates, key=lambda e: len(e.absolute_path))
    path = ".".join(str(p) for p in error.absolute_path)
    known = error.schema.get("properties", {}) if isinstance(error.schema, dict) else {}
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        unknown = sorted(str(k) for k in error.instance if k not in known)
        field = f"{path}.{unknown[0]}" if path else unknown[0]
        raise ConfigError(f"{source}: unknown field {field} (known: {', '.join(sorted(known))})")
    shown = json.dumps(error.instance, default=str)
    shown = shown if len(shown) <= 60 else "a longer value"
    expected = _expected(error.schema) if isinstance(error.schema, dict) else error.message
    raise ConfigError(f"{source}: field {path or '(the document)'} must be {expected} (got {shown})")


_TYPE_WORDS = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "array": "a list",
    "object": "a mapping",
    "null": "null",
}


def _expected(field_schema: dict[str, Any]) -> str:
    """What a field's schema asks for, in words (a string's description names what it holds)."""
    if "oneOf" in field_schema:
        return " or ".join(_expected(s) for s in field_schema["oneOf"])
    if "const" in field_schema:
        return json.dumps(field_schema["const"])
    types = field_schema.get("type", [])
    words = [_TYPE_WORDS[t] for t in ([types] if isinstance(types, str) else types)]
    description = field_schema.get("description")
    if description and "a string" in words:
        words[words.index("a string")] = description
    elif "a string" in words and field_schema.get("minLength") == 1:
        words[words.index("a string")] = "a non-empty string"
    text = " or ".join(words)
    if description and description not in words:
        text += f" ({description})"
    if "minimum" in field_schema:
        text += f" >= {field_schema['minimum']}"
    if isinstance(field_schema.get("additionalProperties"), dict):
        text += f" whose values are each {_expected(field_schema['additionalProperties'])}"
    if isinstance(field_schema.get("items"), dict):
        text += f" whose items are each {_expected(field_schema['items'])}"
    if "pattern" in field_schema and not description:
        text += f" matching {field_schema['pattern']}"
    return text or "valid"


def _merge(base: dict[str, Any], override: dict[str, Any], path: str, source: str) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if key in ("apiVersion", "kind"):
            continue
        if key not in base:
            raise ConfigError(f"{source}: unknown field {path}{key} (known: {', '.join(sorted(base))})")
        if isinstance(base[key], dict) and base[key] and key not in ("namespaces", "values"):
            if not isinstance(value, dict):
                raise ConfigError(f"{source}: field {path}{key} must be a mapping")
            out[key] = _merge(base[key], value, f"{path}{key}.", source)
        else:
            out[key] = value
    return out


def _validate(raw: dict[str, Any], source: str) -> None:
    cp = raw["checkpoint"]
    lo, hi = parse_duration(str(cp["minInterval"])), parse_duration(str(cp["maxInterval"]))
    if lo is None or hi is None or lo > hi:
        raise ConfigError(
            f"{source}: checkpoint.minInterval/maxInterval must be durations with min <= max "
            f"(got {cp['minInterval']!r}, {cp['maxInterval']!r})"
        )
    cp["minIntervalSeconds"], cp["maxIntervalSeconds"] = lo, hi
    _validate_accelerators(raw["accelerators"], source)
    _validate_recovery(raw, source)


def _validate_accelerators(value: Any, source: str) -> None:
    """A list of extended resource names, each whole or a prefix ending in a single "*"."""
    if not isinstance(value, list):
        raise ConfigError(f"{source}: accelerators must be a list of resource names (got {value!r})")
    for i, name in enumerate(value):
        where = f"accelerators[{i}]"
        if not isinstance(name, str) or not name.strip("*"):
            raise ConfigError(
                f"{source}: {where} must be a resource name such as nvidia.com/gpu (got {name!r})"
            )
        if "*" in name[:-1] or "/" not in name:
            raise ConfigError(
                f"{source}: {where} is {name!r}: write a domain-prefixed resource name (amd.com/gpu), "
                "or a prefix ending in * (nvidia.com/mig-*)"
            )


# Per-tier recovery fields: name -> (default, kind). Durations also get a `<name>Seconds` twin so
# policies compare numbers, not strings.
_RECOVERY_FIELDS: dict[str, tuple[Any, str]] = {
    "resumePriorityClass": (None, "name"),
    "cooldown": ("5m", "duration"),
    "maxResumingPerQueue": (1, "count"),
    "maxGated": ("30m", "duration"),
    "settle": ("60s", "duration"),
    "preemptionsPerHour": (0, "rate"),
    "restartTime": ("2m", "duration"),
}
_TIERS = ("guaranteed", "preemptible")


def _validate_recovery(raw: dict[str, Any], source: str) -> None:
    """Fill each configured tier's recovery block with its defaults; refuse what is not one."""
    tiers = raw["recovery"]["tiers"]
    if not isinstance(tiers, dict):
        raise ConfigError(f"{source}: recovery.tiers must be a mapping of tier -> settings")
    for tier in tiers:
        if tier not in _TIERS:
            raise ConfigError(f"{source}: unknown field recovery.tiers.{tier} (known: {', '.join(_TIERS)})")
    for tier in _TIERS:
        block = tiers.get(tier)
        if block is None:
            tiers[tier] = None
            continue
        where = f"recovery.tiers.{tier}"
        if not isinstance(block, dict):
            raise ConfigError(f"{source}: {where} must be a mapping (or null to leave the tier ungoverned)")
        for key in block:
            if key not in _RECOVERY_FIELDS:
                known = ", ".join(_RECOVERY_FIELDS)
                raise ConfigError(f"{source}: unknown field {where}.{key} (known: {known})")
        out: dict[str, Any] = {}
        for key, (default, kind) in _RECOVERY_FIELDS.items():
            value = block.get(key, default)
            out[key] = value
            field = f"{where}.{key}"
            if kind == "duration":
                seconds = parse_duration(value) if isinstance(value, str) else None
                if seconds is None:
                    raise ConfigError(
                        f"{source}: {field} must be a duration such as 90s, 5m or 1h (got {value!r})"
                    )
                out[key + "Seconds"] = seconds
            elif kind == "count":
                if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                    raise ConfigError(f"{source}: {field} must be an integer >= 1 (got {value!r})")
            elif kind == "rate":
                if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
                    raise ConfigError(f"{source}: {field} must be a number >= 0 (got {value!r})")
                out[key] = float(value)
            elif value is not None and (not isinstance(value, str) or not value):
                raise ConfigError(f"{source}: {field} must be a PriorityClass name or null (got {value!r})")
        if out["maxGatedSeconds"] < out["cooldownSeconds"]:
            raise ConfigError(
                f"{source}: {where}.maxGated ({out['maxGated']}) must not be shorter than its cooldown "
                f"({out['cooldown']}): every gated workload would be released by the bound"
            )
        tiers[tier] = out


def config_from_mapping(doc: dict[str, Any], source: str) -> PlatformConfig:
    """A PlatformConfig from an already-parsed mapping, merged over the embedded defaults."""
    if doc.get("kind", "PlatformConfig") != "PlatformConfig":
        raise ConfigError(f"{source}: kind must be PlatformConfig, got {doc.get('kind')!r}")
    _check_types(doc, source)
    raw = _merge(yaml.safe_load(_defaults_text()), doc, "", source)
    _validate(raw, source)
    return PlatformConfig(raw=raw, source=source)


def load_config(path: str | Path | None = None) -> PlatformConfig:
    """The embedded defaults, overridden field by field by the file at `path` when given."""
    from webhook.documents import load_yaml_documents  # local: documents imports errors only

    base = yaml.safe_load(_defaults_text())
    source = "<embedded defaults>"
    if path is not None:
        source = str(path)
        try:
            text = Path(path).read_text("utf-8")
        except OSError as exc:
            raise ConfigError(f"{source}: cannot read: {exc.strerror}") from exc
        try:
            docs = [d.data for d in load_yaml_documents(text, source)]
        except Exception as exc:  # InputError: re-raise as a config problem, same location
            raise ConfigError(str(exc)) from exc
        if len(docs) != 1 or not isinstance(docs[0], dict):
            raise ConfigError(f"{source}: a PlatformConfig file holds exactly one mapping")
        return config_from_mapping(docs[0], source)
    _validate(base, source)
    return PlatformConfig(raw=base, source=source)
