"""JumpStart model ids resolved the way the SageMaker SDK resolves them, from its metadata.

The SDK (sagemaker-core's `jumpstart` package: `JumpStartModelsCache`, `image_uris`,
`model_uris`, `environment_variables`, `get_draft_model_content_bucket`) reads the
region's content bucket: `models_manifest.json` (model id, version, spec key), then the
model's spec file. From the spec it takes the hosting image (an alias in
`hosting_instance_type_variants`, per instance type or family, per region), the prepacked
artifact (in the gated bucket when `gated_bucket`), the container environment (the
variables `required_for_model_class`, then the instance type's), and the EULA requirement
(`gated_bucket` or a `hosting_eula_key`). A SageMaker-provided draft for speculative
decoding is a `speculative_decoding` data source in the spec or in one of its deployment
configs (`inference_configs`); its bucket follows the source's `provider`.

Everything here is pure: `resolve_sources` takes a `read(key) -> bytes` for the content
bucket, which `aws.jumpstart` backs with S3 GetObject. Bucket names come from the SDK's
own region table (`region_config.json` in sagemaker-core), read as data like the image
tables (see sagemaker/images.py).
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from endpoint_optimizer.api import DraftProvider, OptimizedEndpointSpec, SpeculativeMethod

MANIFEST_KEY = "models_manifest.json"
DRAFT_CHANNEL = "draft_model"
_REGION_TABLE = "sagemaker/core/jumpstart/region_config.json"

MODEL_FIELD = "spec.model.jumpStartModelId"
DRAFT_FIELD = "spec.optimizations.speculativeDecoding.draftModel"


class JumpStartError(LookupError):
    """The metadata has no answer for the spec; the message names the field to change."""


@functools.cache
def _regions() -> dict[str, dict[str, str]]:
    try:
        dist = metadata.distribution("sagemaker-core")
        text = dist.locate_file(_REGION_TABLE).read_text()
    except (metadata.PackageNotFoundError, OSError, AttributeError):
        raise JumpStartError(
            "the SageMaker SDK's JumpStart region table (sagemaker-core, a dependency of the "
            "operator) is not installed; reinstall the operator with its dependencies"
        ) from None
    table: dict[str, dict[str, str]] = json.loads(text)
    return table


def _bucket(region: str, kind: str) -> str:
    entry = _regions().get(region)
    if entry is None or not entry.get(kind):
        raise JumpStartError(
            f"{MODEL_FIELD}: JumpStart has no {kind.replace('_', ' ')} in region {region}; "
            "use a model source in S3 (spec.model.s3Uri) or another region"
        )
    return entry[kind]


def content_buckets() -> frozenset[str]:
    """Every region's JumpStart content bucket (the sandbox serves metadata from these)."""
    return frozenset(entry["content_bucket"] for entry in _regions().values())


def content_bucket(region: str) -> str:
    """Where the region's manifest, specs and ungated artifacts are."""
    return _bucket(region, "content_bucket")


def gated_bucket(region: str) -> str:
    return _bucket(region, "gated_content_bucket")


def draft_bucket(provider: Mapping[str, Any], region: str) -> str:
    """The SDK's `get_draft_model_content_bucket`: JumpStart drafts live in the (gated)
    content bucket, every other draft (SageMaker's own) in the region's neo bucket."""
    if provider.get("name") == "JumpStart":
        gated = provider.get("classification", "ungated") == "gated"
        return gated_bucket(region) if gated else content_bucket(region)
    return _bucket(region, "neo_content_bucket")


# --------------------------------------------------------------------------- resolved


@dataclass(frozen=True)
class DraftSource:
    """A draft model's S3 data source, mounted as channel `draft_model`."""

    s3_uri: str
    provider: str  # "SageMaker" (the model's own metadata) or "JumpStart"
    gated: bool = False
    s3_data_type: str = "S3Prefix"
    compression_type: str = "None"


@dataclass(frozen=True)
class JumpStartModel:
    """One model's specs, resolved for a region and instance type."""

    model_id: str
    version: str
    image: str | None
    artifact_s3_uri: str
    environment: Mapping[str, str] = field(default_factory=dict)
    gated: bool = False
    eula_key: str | None = None
    config_name: str | None = None
    draft: DraftSource | None = None

    def eula_uri(self, region: str) -> str:
        return f"s3://{content_bucket(region)}/{self.eula_key}" if self.eula_key else ""


@dataclass(frozen=True)
class ModelSources:
    """The observation planning reads: the JumpStart specs a spec names, resolved.

    `problem` is a permanent resolution failure (an unknown id, no image for the
    instance type), worded with the field to change; planning turns it into Terminal.
    """

    model: JumpStartModel | None = None
    draft: JumpStartModel | None = None
    problem: str = ""


# --------------------------------------------------------------------------- pure steps


def select_version(
    manifest: list[dict[str, Any]], model_id: str, version: str, field_path: str
) -> dict[str, Any]:
    """The manifest header for (model id, version): the SDK's `_select_version`: `*` is
    the newest, an exact version itself, otherwise the newest within the specifier."""
    headers = [h for h in manifest if h.get("model_id") == model_id]
    if not headers:
        raise JumpStartError(
            f"{field_path}: {model_id!r} is not in the region's JumpStart catalogue; check "
            "the id (e.g. meta-textgeneration-llama-3-1-8b-instruct) and the region"
        )

    def key(header: dict[str, Any]) -> Version:
        return Version(str(header["version"]))

    if version == "*":
        return max(headers, key=key)
    exact = [h for h in headers if h["version"] == version]
    if exact:
        return exact[0]
    try:
        wanted = SpecifierSet(f"=={version}")
        matching = [h for h in headers if key(h) in wanted]
    except (InvalidSpecifier, InvalidVersion):
        matching = []
    if not matching:
        known = ", ".join(sorted((h["version"] for h in headers), key=Version))
        raise JumpStartError(
            f"{field_path.removesuffix('Id')}Version: {model_id} has no version {version!r} "
            f"(known: {known}); use `*` for the newest"
        )
    return max(matching, key=key)


def _family(instance_type: str) -> str:
    return instance_type.removeprefix("ml.").split(".")[0]


def _variant(variants: Mapping[str, Any], instance_type: str) -> list[Mapping[str, Any]]:
    """The instance type's variant entry, then its family's (the SDK looks in that order)."""
    return [
        variants[name]
        for name in (instance_type, _family(instance_type))
        if isinstance(variants.get(name), Mapping)
    ]


def _image(specs: Mapping[str, Any], region: str, instance_type: str) -> str | None:
    """`JumpStartInstanceTypeVariants.get_image_uri`: a `$alias` of the region's aliases."""
    hosting = specs.get("hosting_instance_type_variants") or {}
    aliases = (hosting.get("regional_aliases") or {}).get(region)
    for entry in _variant(hosting.get("variants") or {}, instance_type):
        alias = (entry.get("regional_properties") or {}).get("image_uri")
        if alias and aliases is not None and str(alias).startswith("$"):
            uri = aliases.get(alias[1:])
            return str(uri) if uri else None
        value = (entry.get("properties") or {}).get("image_uri")
        if value:
            return str(value)
    return None


def _instance_property(specs: Mapping[str, Any], instance_type: str, name: str) -> Any:
    hosting = specs.get("hosting_instance_type_variants") or {}
    for entry in _variant(hosting.get("variants") or {}, instance_type):
        value = (entry.get("properties") or {}).get(name)
        if value:
            return value
    return None


def _environment(specs: Mapping[str, Any], instance_type: str) -> dict[str, str]:
    """`environment_variables.retrieve_default(include_aws_sdk_env_vars=False)`."""
    environment = {
        str(v["name"]): str(v["default"])
        for v in specs.get("inference_environment_variables") or []
        if v.get("required_for_model_class")
    }
    hosting = specs.get("hosting_instance_type_variants") or {}
    for entry in reversed(_variant(hosting.get("variants") or {}, instance_type)):
        values = (entry.get("properties") or {}).get("environment_variables") or {}
        environment.update({str(k): str(v) for k, v in values.items()})
    return environment


def _artifact(specs: Mapping[str, Any], region: str, instance_type: str) -> str:
    """`model_uris.retrieve(model_scope="inference")`: the prepacked artifact if any."""
    prepacked = specs.get("hosting_prepacked_artifact_key") is not None
    key = (
        _instance_property(specs, instance_type, "prepacked_artifact_key")
        or specs.get("hosting_prepacked_artifact_key")
        if prepacked
        else _instance_property(specs, instance_type, "artifact_key")
        or specs.get("hosting_artifact_key")
    )
    if not key:
        raise JumpStartError(f"{MODEL_FIELD}: {specs.get('model_id')} has no hosting artifact")
    if str(key).startswith("s3://"):
        return str(key)
    bucket = gated_bucket(region) if specs.get("gated_bucket") else content_bucket(region)
    return f"s3://{bucket}/{key}"


def _deep_override(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            base[key] = _deep_override(base[key], value)
        else:
            base[key] = copy.deepcopy(value)
    return base


def deployment_configs(specs: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(name, resolved spec) of each inference config, in the metadata's ranking order:
    the spec's fields overridden by each of the config's components in turn."""
    configs = specs.get("inference_configs") or {}
    if "configs" in configs:
        configs = configs["configs"]
    components = specs.get("inference_config_components") or {}
    rankings = ((specs.get("inference_config_rankings") or {}).get("overall") or {}).get(
        "rankings"
    ) or list(configs)
    base = {
        k: v
        for k, v in specs.items()
        if k not in ("inference_configs", "inference_config_components")
    }
    resolved = []
    for name in [n for n in rankings if n in configs] + [n for n in configs if n not in rankings]:
        merged = copy.deepcopy(base)
        for component in configs[name].get("component_names") or []:
            merged = _deep_override(merged, components.get(component) or {})
        resolved.append((name, merged))
    return resolved


def _sagemaker_draft(specs: Mapping[str, Any], region: str) -> DraftSource | None:
    for source in (specs.get("hosting_additional_data_sources") or {}).get(
        "speculative_decoding"
    ) or []:
        provider = source.get("provider") or {}
        if source.get("channel_name") != DRAFT_CHANNEL or provider.get("name") == "JumpStart":
            continue
        s3 = source["s3_data_source"]
        uri = str(s3["s3_uri"])
        if not uri.startswith("s3://"):
            uri = f"s3://{draft_bucket(provider, region)}/{uri}"
        return DraftSource(
            s3_uri=uri,
            provider="SageMaker",
            gated=bool((s3.get("model_access_config") or {}).get("accept_eula") is not None),
            s3_data_type=str(s3.get("s3_data_type", "S3Prefix")),
            compression_type=str(s3.get("compression_type", "None")),
        )
    return None


def resolve(
    specs: Mapping[str, Any],
    region: str,
    instance_type: str,
    *,
    field_path: str = MODEL_FIELD,
    needs_image: bool = True,
    sagemaker_draft: bool = False,
) -> JumpStartModel:
    """One spec file, resolved for the region and instance type.

    With `sagemaker_draft`, the first deployment config (by ranking) that carries a
    SageMaker-provided draft is applied, as the SDK's `ModelProvider: SAGEMAKER` does.
    """
    chosen: Mapping[str, Any] = specs
    config_name: str | None = None
    draft = _sagemaker_draft(specs, region) if sagemaker_draft else None
    if sagemaker_draft and draft is None:
        for name, resolved_config in deployment_configs(specs):
            draft = _sagemaker_draft(resolved_config, region)
            if draft is not None:
                chosen, config_name = resolved_config, name
                break
        if draft is None:
            raise JumpStartError(
                f"{DRAFT_FIELD}.modelProvider: {specs.get('model_id')} has no SageMaker-provided "
                "draft model; name a draft with draftModel.jumpStartModelId, s3Uri or hfModelId"
            )
    image = _image(chosen, region, instance_type)
    if image is None and needs_image:
        raise JumpStartError(
            f"{field_path}: {specs.get('model_id')} has no inference image for {instance_type} "
            f"in {region}; choose one of its instance types "
            f"({', '.join(specs.get('supported_inference_instance_types') or [])}) or set "
            "spec.model.image"
        )
    return JumpStartModel(
        model_id=str(specs.get("model_id")),
        version=str(specs.get("version")),
        image=image,
        artifact_s3_uri=_artifact(chosen, region, instance_type),
        environment=_environment(chosen, instance_type),
        gated=bool(chosen.get("gated_bucket")) or chosen.get("hosting_eula_key") is not None,
        eula_key=chosen.get("hosting_eula_key"),
        config_name=config_name,
        draft=draft,
    )


def wanted(spec: OptimizedEndpointSpec) -> bool:
    """Whether the spec names anything JumpStart resolves (so its metadata is read)."""
    draft = spec.optimizations.speculative_decoding
    return spec.model.jump_start_model_id is not None or (
        draft is not None
        and draft.method is SpeculativeMethod.DRAFT_MODEL
        and draft.draft_model is not None
        and draft.draft_model.jump_start_model_id is not None
    )


def resolve_sources(spec: OptimizedEndpointSpec, read: Callable[[str], bytes]) -> ModelSources:
    """The JumpStart specs the spec names, from the region's content bucket via `read`.

    A metadata answer that the spec cannot use (unknown id, version or instance type)
    comes back as `problem`; what `read` raises (S3 errors) propagates to the caller.
    """
    if not wanted(spec):
        return ModelSources()
    try:
        manifest: list[dict[str, Any]] = json.loads(read(MANIFEST_KEY))

        def specs_of(model_id: str, version: str, field_path: str) -> dict[str, Any]:
            header = select_version(manifest, model_id, version, field_path)
            loaded: dict[str, Any] = json.loads(read(str(header["spec_key"])))
            return loaded

        speculative = spec.optimizations.speculative_decoding
        source = speculative.draft_model if speculative is not None else None
        model = None
        if spec.model.jump_start_model_id is not None:
            model = resolve(
                specs_of(
                    spec.model.jump_start_model_id, spec.model.jump_start_model_version, MODEL_FIELD
                ),
                spec.region,
                spec.instance_type,
                needs_image=spec.model.image is None,
                sagemaker_draft=source is not None
                and source.model_provider is DraftProvider.SAGEMAKER,
            )
        draft = None
        if source is not None and source.jump_start_model_id is not None:
            draft = resolve(
                specs_of(
                    source.jump_start_model_id,
                    source.jump_start_model_version,
                    f"{DRAFT_FIELD}.jumpStartModelId",
                ),
                spec.region,
                spec.instance_type,
                field_path=f"{DRAFT_FIELD}.jumpStartModelId",
                needs_image=False,
            )
    except JumpStartError as exc:
        return ModelSources(problem=str(exc))
    except (ValueError, KeyError, TypeError) as exc:
        return ModelSources(
            problem=f"{MODEL_FIELD}: the region's JumpStart metadata could not be read "
            f"({type(exc).__name__}: {str(exc)[:200]})"
        )
    return ModelSources(model=model, draft=draft)
