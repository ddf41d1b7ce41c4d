"""schemathesis against ``/openapi.json``: every operation with bounded generated examples (20 each, derandomized),
called with an admin token (and once without any): no server error, every status and error body as documented
(``ErrorResponse``), every content type as documented."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("schemathesis", reason="schemathesis is not installed (the 'dev' extra)")

import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


MAX_EXAMPLES = 20


def test_api_conforms_to_its_schema(service_app: Any, headers_for: Callable[[str], dict[str, str]]) -> None:
    schema = schemathesis.openapi.from_asgi("/openapi.json", service_app).include(path_regex="^/api/v1/")
    admin = headers_for("admin")
    operations = sorted(
        (result.ok() for result in schema.get_all_operations()),  # revoking (the admin token
        key=lambda op: op.path.endswith("/revoke"),
    )  # among others) goes last
    assert len(operations) >= 18
    seen: dict[str, set[int]] = {}

    for operation in operations:
        _check(operation, admin, seen.setdefault(f"{operation.method.upper()} {operation.path}", set()))()
    assert all(codes for codes in seen.values()), seen
    assert all(code < 500 for codes in seen.values() for code in codes)
    assert seen["GET /api/v1/whoami"] == {200} and seen["POST /api/v1/tokens"] == {201}


def _check(operation: Any, admin: dict[str, str], seen: set[int]) -> Callable[[], None]:
    @given(case=operation.as_strategy())
    @settings(
        max_examples=MAX_EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def check(case: Any) -> None:
        response = case.call(headers=admin)
        case.validate_response(response, checks=CHECKS)
        seen.add(response.status_code)
        if response.status_code >= 400:
            error = response.json()["error"]
            assert set(error) == {"message", "field", "code"} and error["message"]
        if operation.path != "/api/v1/health":
            anonymous = case.call(headers={"Authorization": "Bearer rs_unknown"})
            case.validate_response(anonymous, checks=CHECKS)
            assert anonymous.status_code in (401, 413, 415, 422), anonymous.status_code

    return check  # type: ignore[no-any-return]
