"""The pydantic base for every structure that crosses the Kubernetes boundary.

Kubernetes objects are camelCase; Python is snake_case. Models accept either on
input and always write camelCase (`model_dump(by_alias=True)`), so spec, status
and the judges' checks read the same in YAML as in `kubectl get -o yaml`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class CamelModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_enum_values=False,
    )

    def dump(self) -> dict[str, object]:
        """The camelCase JSON form, without unset optional fields."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
