"""docs/iam-policy.json grants exactly the AWS actions the operator's code calls.

The operator's AWS calls are collected by reading its source (AST), not by running it:

- boto3 client method calls, `client.describe_endpoint(...)`, whose method is an
  operation of SageMaker, SageMaker Runtime, CloudWatch or S3 (botocore's own service
  models say which names are operations), plus `get_paginator("...")`;
- operation names passed as data, `aws.call("sagemaker", region, "DescribeEndpoint")` or
  an enum of actions whose values are operation names: every string constant that is
  exactly an operation name of those services.

Only files that `endpoint-optimizer run` imports are read (tests/unit/chart/operator_code.py):
the sandbox, the demo and the other CLIs never run in the operator, and jobs/ run inside
SageMaker jobs with their own role.
"""

from __future__ import annotations

import ast
import json
from collections import defaultdict
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import botocore.session
import pytest
from botocore import xform_name

from endpoint_optimizer.api import ADOPT_TAG_KEY
from endpoint_optimizer.sagemaker.naming import OWNER_TAG_KEY
from tests.unit.chart.operator_code import operator_modules

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "operator" / "endpoint_optimizer"
POLICY = REPO / "docs" / "iam-policy.json"
SERVICES = (
    "sagemaker",
    "sagemaker-runtime",
    "cloudwatch",
    "logs",
    "s3",
    "application-autoscaling",
    "pricing",
)

# IAM actions whose name is not "<prefix>:<OperationName>" (AWS service authorization
# reference; the runtime API documents that streaming needs sagemaker:InvokeEndpoint).
IAM_ACTIONS: dict[tuple[str, str], tuple[str, ...]] = {
    ("sagemaker-runtime", "InvokeEndpointWithResponseStream"): ("sagemaker:InvokeEndpoint",),
    ("s3", "HeadObject"): ("s3:GetObject",),
    ("s3", "ListObjectsV2"): ("s3:ListBucket",),
    ("s3", "ListObjects"): ("s3:ListBucket",),
    ("s3", "HeadBucket"): ("s3:ListBucket",),
    ("s3", "DeleteObjects"): ("s3:DeleteObject",),
    ("s3", "CopyObject"): ("s3:GetObject", "s3:PutObject"),
}
# Operations whose request hands SageMaker a role (ExecutionRoleArn / RoleArn).
PASSES_ROLE = frozenset(
    {"CreateModel", "CreateOptimizationJob", "CreateCompilationJob", "CreateTrainingJob"}
)
# Operations whose request may carry a KMS key (spec.network.volumeKmsKeyId on the endpoint
# config): SageMaker creates a grant on the key for the endpoint's volumes as the caller of
# CreateEndpoint / UpdateEndpoint, so the caller needs kms:CreateGrant.
GRANTS_KMS_KEY = frozenset({"CreateEndpoint", "UpdateEndpoint"})
# Method names every boto3 client has that are not API operations.
CLIENT_HELPERS = frozenset({"get_paginator", "get_waiter", "can_paginate", "close"})
# A method call counts as a boto3 call when its receiver is named like a client: `client`,
# `self._client`, `runtime_client`, `sm`, `cloudwatch`, ... so `pattern.search()` does not
# read as sagemaker:Search. The operator's code follows this naming.
CLIENT_NAMES = frozenset({"sm", "sagemaker", "runtime", "cloudwatch", "cw", "s3"})


@dataclass(frozen=True)
class Use:
    service: str
    operation: str
    where: str


@cache
def operations() -> dict[str, frozenset[str]]:
    session = botocore.session.get_session()
    return {
        service: frozenset(session.get_service_model(service).operation_names)
        for service in SERVICES
    }


def _services_naming(operation: str) -> list[str]:
    return [service for service, names in operations().items() if operation in names]


def operator_sources() -> list[Path]:
    """The files `endpoint-optimizer run` imports (sandbox/ and jobs/ excluded)."""
    return sorted(operator_modules().values())


def _docstring_nodes(tree: ast.AST) -> set[int]:
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _module_aliases(tree: ast.AST) -> set[str]:
    """Names bound to our own modules (`from endpoint_optimizer.x import observe`)."""
    aliases: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
            "endpoint_optimizer"
        ):
            for alias in node.names:
                module = f"{node.module}.{alias.name}".replace(".", "/")
                if (REPO / "operator" / f"{module}.py").exists() or (
                    REPO / "operator" / module
                ).is_dir():
                    aliases.add(alias.asname or alias.name)
    return aliases


def _looks_like_client(receiver: ast.expr) -> bool:
    text = ast.unparse(receiver)
    last = text.rsplit(".", 1)[-1].strip("_").lower()
    return "client" in text.lower() or last in CLIENT_NAMES


def scan_source(source: str, filename: str) -> tuple[list[Use], list[str]]:
    """(uses, problems): problems are names that match an operation of several services."""
    tree = ast.parse(source, filename)
    docstrings = _docstring_nodes(tree)
    modules = _module_aliases(tree)
    snake = {
        xform_name(op): (service, op) for service, names in operations().items() for op in names
    }
    snake_services: dict[str, set[str]] = defaultdict(set)
    for service, names in operations().items():
        for op in names:
            snake_services[xform_name(op)].add(service)
    uses: list[Use] = []
    problems: list[str] = []

    def record(name: str, services: list[str], node: ast.AST) -> None:
        where = f"{filename}:{getattr(node, 'lineno', 0)}"
        if len(services) == 1:
            uses.append(Use(services[0], name, where))
        elif len(services) > 1:
            problems.append(f"{where}: {name} is an operation of {services}; name the service")

    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            method = node.func.attr
            receiver = node.func.value
            if isinstance(receiver, ast.Name) and receiver.id in modules:
                continue
            if not _looks_like_client(receiver):
                continue
            if method == "get_paginator" and node.args and isinstance(node.args[0], ast.Constant):
                paginated = str(node.args[0].value)
                record(snake[paginated][1], sorted(snake_services[paginated]), node)
            elif method in snake and method not in CLIENT_HELPERS:
                record(snake[method][1], sorted(snake_services[method]), node)
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
            and _services_naming(node.value)
        ):
            record(node.value, _services_naming(node.value), node)
    return uses, problems


def scan_operator() -> tuple[list[Use], list[str]]:
    uses: list[Use] = []
    problems: list[str] = []
    for path in operator_sources():
        found, trouble = scan_source(path.read_text(), str(path.relative_to(REPO)))
        uses += found
        problems += trouble
    return uses, problems


def required_actions(uses: list[Use]) -> dict[str, list[str]]:
    """IAM action -> where in the code it is needed."""
    needed: dict[str, list[str]] = defaultdict(list)
    for use in uses:
        prefix = "sagemaker" if use.service == "sagemaker-runtime" else use.service
        for action in IAM_ACTIONS.get((use.service, use.operation), (f"{prefix}:{use.operation}",)):
            needed[action].append(use.where)
        if use.operation in PASSES_ROLE:
            needed["iam:PassRole"].append(use.where)
        if use.operation in GRANTS_KMS_KEY:
            needed["kms:CreateGrant"].append(use.where)
    # Tags on a Create* request need sagemaker:AddTags (tag-on-create authorization), and on
    # PutMetricAlarm cloudwatch:TagResource.
    for use in uses:
        if use.service == "sagemaker" and use.operation.startswith("Create"):
            if _request_has_tags():
                needed["sagemaker:AddTags"].append(use.where)
            break
    for use in uses:
        if (use.service, use.operation) == ("cloudwatch", "PutMetricAlarm") and _alarms_tagged():
            needed["cloudwatch:TagResource"].append(use.where)
            break
    return needed


@cache
def _alarms_tagged() -> bool:
    """The alarm requests (sagemaker/requests.rollback_alarms) carry the owner tag."""
    from endpoint_optimizer.sagemaker import requests as rq

    return all("Tags" in alarm for alarm in rq.rollback_alarms("e", "v", "a", 0.1, 1.0, "o"))


@cache
def _request_has_tags() -> bool:
    for path in operator_sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Dict) and any(
                isinstance(key, ast.Constant) and key.value == "Tags" for key in node.keys
            ):
                return True
    return False


def policy_statements() -> list[dict[str, Any]]:
    document = json.loads(POLICY.read_text())
    assert document["Version"] == "2012-10-17"
    statements: list[dict[str, Any]] = document["Statement"]
    return statements


def granted_actions() -> dict[str, list[str]]:
    """IAM action -> Sids that grant it."""
    granted: dict[str, list[str]] = defaultdict(list)
    for statement in policy_statements():
        assert statement["Effect"] == "Allow"
        actions = statement["Action"]
        for action in [actions] if isinstance(actions, str) else actions:
            granted[action].append(statement["Sid"])
    return granted


# --- the scanner itself -------------------------------------------------------------------


def test_scanner_finds_method_calls_paginators_and_operation_names_as_data() -> None:
    source = '''
"""A docstring naming DescribeEndpoint does not count."""
from enum import StrEnum

class Kind(StrEnum):
    CREATE = "CreateModel"

async def f(aws, cw, runtime, s3):
    await aws.call("sagemaker", "us-east-1", "DescribeEndpointConfig", EndpointConfigName="x")
    cw.get_metric_data(MetricDataQueries=[])
    runtime.invoke_endpoint_with_response_stream(EndpointName="e", Body=b"")
    s3.get_paginator("list_objects_v2")
    cw.close()
'''
    uses, problems = scan_source(source, "example.py")
    assert problems == []
    assert {(u.service, u.operation) for u in uses} == {
        ("sagemaker", "CreateModel"),
        ("sagemaker", "DescribeEndpointConfig"),
        ("cloudwatch", "GetMetricData"),
        ("sagemaker-runtime", "InvokeEndpointWithResponseStream"),
        ("s3", "ListObjectsV2"),
    }
    actions = required_actions(uses)
    assert {"sagemaker:InvokeEndpoint", "s3:ListBucket", "iam:PassRole"} <= set(actions)


def test_scanner_ignores_calls_on_our_modules_and_non_clients() -> None:
    source = """
import re
from endpoint_optimizer.aws import observe
_WORD = re.compile("w")
async def f(aws, text):
    _WORD.search(text)
    re.search("x", text)
    return await observe.describe_endpoint(aws, "r", "n")
"""
    uses, _ = scan_source(source, "example.py")
    assert uses == []


def test_operator_code_names_each_operation_unambiguously() -> None:
    uses, problems = scan_operator()
    assert problems == []
    assert uses, "no AWS call found in the operator's code: the scanner is broken"


# --- the policy against the code --------------------------------------------------------


def test_policy_grants_every_action_the_operator_calls() -> None:
    uses, _ = scan_operator()
    missing = {
        action: where[:3]
        for action, where in required_actions(uses).items()
        if action not in granted_actions()
    }
    assert missing == {}, f"docs/iam-policy.json lacks (action: first call sites): {missing}"


def test_policy_grants_nothing_the_operator_does_not_call() -> None:
    uses, _ = scan_operator()
    unused = {
        action: sids
        for action, sids in granted_actions().items()
        if action not in required_actions(uses)
    }
    assert unused == {}, f"docs/iam-policy.json grants actions no code calls: {unused}"


def test_policy_grants_each_action_once_without_wildcards() -> None:
    for action, sids in granted_actions().items():
        assert "*" not in action, f"{action} in {sids}: list actions explicitly"
        if len(sids) > 1:
            # Several grants of one action are alternatives by tag (owned or adopted
            # endpoints) or by resource type (UpdateEndpoint on the config switched to).
            conditioned = [s for s in policy_statements() if s["Sid"] in sids and "Condition" in s]
            assert len(conditioned) >= len(sids) - 1, f"{action} is granted by {sids}"


def _statements_granting(prefix: str) -> list[dict[str, Any]]:
    """Statements granting a SageMaker or CloudWatch action that starts with `prefix` (what
    the operator makes and changes; kms:CreateGrant is SageMaker's use of a key instead)."""
    return [
        s
        for s in policy_statements()
        if any(
            a.split(":", 1)[1].startswith(prefix)
            for a in s["Action"]
            if a.split(":", 1)[0] in ("sagemaker", "cloudwatch")
        )
    ]


def _condition_keys(statement: dict[str, Any]) -> set[str]:
    return {key for test in statement.get("Condition", {}).values() for key in test}


def test_every_create_must_carry_the_owner_tag() -> None:
    owner = f"aws:RequestTag/{OWNER_TAG_KEY}"
    for statement in _statements_granting("Create"):
        assert statement["Condition"]["Null"][owner] == "false", statement["Sid"]
    (alarms,) = [s for s in policy_statements() if "cloudwatch:PutMetricAlarm" in s["Action"]]
    assert alarms["Condition"]["Null"][owner] == "false"


def test_nothing_is_changed_without_an_owner_or_adopt_tag_and_only_owned_things_deleted() -> None:
    owner, adopt = f"aws:ResourceTag/{OWNER_TAG_KEY}", f"aws:ResourceTag/{ADOPT_TAG_KEY}"
    for prefix in ("Update", "Delete", "Stop", "InvokeEndpoint"):
        for statement in _statements_granting(prefix):
            keys = _condition_keys(statement)
            if statement["Resource"] == ["arn:aws:sagemaker:*:*:endpoint-config/*"]:
                # UpdateEndpoint is also checked on the config it switches to (a user's
                # config on the way back from an adopted endpoint's rollout): the endpoint,
                # the thing changed, is what the tag conditions guard.
                assert statement["Action"] == ["sagemaker:UpdateEndpoint"], statement["Sid"]
                continue
            assert keys & {owner, adopt}, f"{statement['Sid']} grants {prefix} on any resource"
            if prefix in ("Delete", "Stop"):
                assert adopt not in keys, f"{statement['Sid']}: deletes what it did not make"


def test_pass_role_is_not_any_role() -> None:
    (statement,) = [s for s in policy_statements() if "iam:PassRole" in s["Action"]]
    assert all(not arn.endswith(":role/*") for arn in statement["Resource"])


def test_pass_role_only_to_sagemaker() -> None:
    (statement,) = [s for s in policy_statements() if "iam:PassRole" in s["Action"]]
    assert statement["Action"] == ["iam:PassRole"]
    assert statement["Condition"] == {
        "StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}
    }
    assert all(":role/" in arn for arn in statement["Resource"])


def test_kms_grants_only_for_aws_resources_through_sagemaker() -> None:
    (statement,) = [s for s in policy_statements() if "kms:CreateGrant" in s["Action"]]
    assert statement["Action"] == ["kms:CreateGrant"]
    assert statement["Condition"]["Bool"] == {"kms:GrantIsForAWSResource": "true"}
    assert statement["Condition"]["StringLike"] == {"kms:ViaService": "sagemaker.*.amazonaws.com"}


def test_autoscaling_writes_only_reach_sagemaker_variant_instance_counts() -> None:
    writes = [
        s
        for s in policy_statements()
        if any(a.startswith("application-autoscaling:") for a in s["Action"])
        and s["Resource"] != "*"
    ]
    (statement,) = writes
    assert statement["Resource"] == ["arn:aws:application-autoscaling:*:*:scalable-target/*"]
    assert statement["Condition"] == {
        "StringEquals": {
            "application-autoscaling:service-namespace": "sagemaker",
            "application-autoscaling:scalable-dimension": "sagemaker:variant:DesiredInstanceCount",
        }
    }
    assert not any("Delete" in a for a in statement["Action"])


def test_sagemaker_actions_are_scoped_to_resource_types() -> None:
    # Only actions that AWS does not scope by resource may use "*".
    unscoped_allowed = {"cloudwatch:GetMetricData", "cloudwatch:GetMetricStatistics"}
    unscoped_allowed |= {"cloudwatch:ListMetrics", "cloudwatch:DescribeAlarms"}
    # Application Auto Scaling's Describe actions take no resource (its authorization
    # reference); its writes are scoped to scalable targets below.
    unscoped_allowed |= {
        "application-autoscaling:DescribeScalableTargets",
        "application-autoscaling:DescribeScalingPolicies",
    }
    # SageMaker's List actions take no resource either: the finalizer's sweep for what a
    # lost status write left unnamed (aws/sweep.py) keeps only names proven its own.
    unscoped_allowed |= {
        "sagemaker:ListModels",
        "sagemaker:ListEndpointConfigs",
        "sagemaker:ListOptimizationJobs",
        "sagemaker:ListTrainingJobs",
        "sagemaker:ListInferenceComponents",
    }
    # The Price List has no resources: public prices, read for spec.search's costs.
    unscoped_allowed |= {"pricing:GetProducts"}
    for statement in policy_statements():
        resources = statement["Resource"]
        if resources == "*" or resources == ["*"]:
            actions = set(statement["Action"])
            assert actions <= unscoped_allowed, f"{statement['Sid']} grants {actions} on *"
        else:
            for arn in resources:
                assert arn.startswith("arn:aws:"), f"{statement['Sid']}: {arn}"


@pytest.mark.parametrize("doc", ["iam.md"])
def test_iam_doc_lists_every_granted_action(doc: str) -> None:
    text = (REPO / "docs" / doc).read_text()
    for action in granted_actions():
        assert f"`{action}`" in text, f"docs/{doc} does not explain {action}"
